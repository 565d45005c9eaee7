"""What each SASL listener offers, read from the configuration with Kafka's key names, and checked once
at start-up so that a listener nobody could log in to stops the broker with a message naming the key.

Per listener ``<l>`` (lower case in the keys, as Kafka writes them):

- ``listener.name.<l>.sasl.enabled.mechanisms``, else ``sasl.enabled.mechanisms`` (Kafka's default: GSSAPI).
  Served: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER. Others (GSSAPI) are warned about and not
  offered; a listener left with none stops start-up.
- ``listener.name.<l>.<mechanism>.sasl.jaas.config``: PLAIN's users (required for PLAIN), OAUTHBEARER's
  unsecured-validator options; optional for SCRAM (Kafka wants a ScramLoginModule line; its options are
  unused). As in Kafka, a broker does not read ``sasl.jaas.config`` or ``listener.name.<l>.sasl.jaas.config``
  (warned about), nor a static JAAS file.
- ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class``: a ``package.module:function`` token
  validator (minibroker/security/sasl/oauthbearer.py) instead of the unsecured one.
- ``connections.max.reauth.ms`` (also per listener and per listener and mechanism) and
  ``sasl.server.max.receive.size`` (also per listener).

Configuration only: the mechanisms' server sides, and the OAUTHBEARER validator built from these settings,
are minibroker/security/sasl/.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from minibroker.config.jaas import JaasEntry, module_options, parse_jaas_config
from minibroker.config.keys import listener_key

log = logging.getLogger("minibroker.security.sasl")

PLAIN, OAUTHBEARER = "PLAIN", "OAUTHBEARER"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")  # minibroker/security/sasl/scram.py serves them
SERVED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS, OAUTHBEARER)
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
JAAS_KEY = "sasl.jaas.config"
CALLBACK_HANDLER_KEY = "sasl.server.callback.handler.class"
REAUTH_KEY = "connections.max.reauth.ms"

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
USER_OPTION_PREFIX = "user_"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
# The options of Kafka's unsecured OAUTHBEARER validator (minibroker/security/sasl/oauthbearer.py)
PRINCIPAL_CLAIM_OPTION = "unsecuredValidatorPrincipalClaimName"
SCOPE_CLAIM_OPTION = "unsecuredValidatorScopeClaimName"
REQUIRED_SCOPE_OPTION = "unsecuredValidatorRequiredScope"
CLOCK_SKEW_OPTION = "unsecuredValidatorAllowableClockSkewMs"


class SaslListenerSettings(NamedTuple):
    listener: str
    mechanisms: tuple[str, ...]  # offered, in the configured order
    plain_users: dict[str, str]  # PLAIN: user -> password
    # OAUTHBEARER: the server callback handler's function and its ``package.module:function`` (None:
    # Kafka's unsecured validator, with ``oauth_options``); security/sasl/oauthbearer.py builds the validator
    oauth_hook: Callable[[str], Any] | None
    oauth_hook_spec: str | None
    oauth_options: dict[str, str]  # the OAuthBearerLoginModule entry's options (checked)
    max_reauth_ms: dict[str, int]  # mechanism -> connections.max.reauth.ms (0: sessions do not expire)
    max_receive_size: int  # largest frame before authentication


class SaslConfigError(ValueError):
    """A SASL listener's configuration cannot work; the message names the key."""


def plain_users(options: dict[str, str]) -> dict[str, str]:
    """user name -> password from the PlainLoginModule's options (``user_<name>="<password>"``)."""
    return {k[len(USER_OPTION_PREFIX):]: v for k, v in options.items() if k.startswith(USER_OPTION_PREFIX)}


class UnsecuredValidatorOptions(NamedTuple):
    principal_claim: str
    scope_claim: str
    required_scope: list[str]
    clock_skew_ms: int


def unsecured_validator_options(options: dict[str, str]) -> UnsecuredValidatorOptions:
    """The unsecured validator's settings from the login module's options; raises ValueError."""
    skew = (options.get(CLOCK_SKEW_OPTION) or "").strip()
    try:
        clock_skew_ms = int(skew) if skew else 0
    except ValueError:
        raise ValueError(f"{CLOCK_SKEW_OPTION}: {skew!r} is not an integer") from None
    if clock_skew_ms < 0:
        raise ValueError(f"Allowable clock skew millis must not be negative: {skew}")
    return UnsecuredValidatorOptions((options.get(PRINCIPAL_CLAIM_OPTION) or "").strip() or "sub",
                                     (options.get(SCOPE_CLAIM_OPTION) or "").strip() or "scope",
                                     (options.get(REQUIRED_SCOPE_OPTION) or "").split(), clock_skew_ms)


def load_hook(spec: str) -> Callable[[str], Any]:
    """``package.module:function`` -> the function (imported now, as Kafka loads a configured class);
    raises ValueError."""
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{spec!r} is not of the form package.module:function")
    try:
        target = importlib.import_module(module_name)
    except Exception as e:  # any import failure (missing module, error inside it) stops start-up
        raise ValueError(f"cannot import {module_name}: {e}") from e
    for name in attr.split("."):
        target = getattr(target, name, None)
        if target is None:
            raise ValueError(f"{module_name} has no attribute {attr}")
    if not callable(target):
        raise ValueError(f"{spec} is not callable")
    return target


def _where(cfg, listener: str, key: str, mechanism: str | None = None) -> str:
    """The key that gave ``key``'s value on ``listener`` (the most specific one set)."""
    for mech in ((mechanism, None) if mechanism else (None,)):
        if cfg.listener_override(listener, key, mech) is not None:
            return listener_key(listener, key, mech)
    return key


def _jaas(cfg, listener: str, mechanism: str) -> list[JaasEntry] | None:
    text = cfg.listener_override(listener, JAAS_KEY, mechanism)
    if text is None:
        return None
    try:
        return parse_jaas_config(text)
    except ValueError as e:
        key = listener_key(listener, JAAS_KEY, mechanism)
        raise SaslConfigError(f"Invalid value for configuration {key}: {e}") from None


def listener_settings(cfg, listener: str, *, warn: bool = True) -> SaslListenerSettings:
    """The settings of one SASL listener; raises SaslConfigError. ``warn``: log what is ignored."""
    warning = log.warning if warn else _quiet
    enabled = [m.strip() for m in cfg.for_listener(listener, "sasl.enabled.mechanisms") if m.strip()]
    enabled_key = _where(cfg, listener, "sasl.enabled.mechanisms")
    offered = tuple(dict.fromkeys(m for m in enabled if m in SERVED_MECHANISMS))
    unserved = [m for m in enabled if m not in SERVED_MECHANISMS]
    if not offered:
        raise SaslConfigError(
            f"Invalid value {','.join(enabled)!r} for configuration {enabled_key}: listener {listener} needs "
            f"at least one SASL mechanism minibroker serves ({', '.join(SERVED_MECHANISMS)})"
            + ("; GSSAPI (Kerberos), Kafka's default, is not served" if "GSSAPI" in enabled else ""))
    if unserved:
        warning("Listener %s: SASL mechanism(s) %s in %s are not served by minibroker and not offered",
                listener, ", ".join(unserved), enabled_key)
    set_unprefixed = ((JAAS_KEY, cfg[JAAS_KEY]),
                      (listener_key(listener, JAAS_KEY), cfg.listener_override(listener, JAAS_KEY)))
    for key in [key for key, value in set_unprefixed if value is not None]:
        warning("Server config %s should be prefixed with the SASL mechanism name "
                "(listener.name.%s.<mechanism>.%s); ignoring it, as Kafka does", key, listener.lower(),
                JAAS_KEY)
    users: dict[str, str] = {}
    if PLAIN in offered:
        entries = _jaas(cfg, listener, PLAIN)
        key = listener_key(listener, JAAS_KEY, PLAIN)
        if entries is None:
            raise SaslConfigError(
                f"Listener {listener} enables PLAIN but {key} is not set: PLAIN's users are the "
                f'user_<name>="<password>" options of its {PLAIN_LOGIN_MODULE} entry')
        options = module_options(entries, PLAIN_LOGIN_MODULE)
        if options is None:
            raise SaslConfigError(f"Invalid value for configuration {key}: no {PLAIN_LOGIN_MODULE} entry")
        users = plain_users(options)
        if not users:
            warning("Listener %s: %s defines no user_<name> option; nobody can log in with PLAIN", listener,
                        key)
    for mechanism in offered:
        if mechanism != PLAIN:
            _jaas(cfg, listener, mechanism)  # checked for syntax even where its options are unused
        hook = cfg.listener_override(listener, CALLBACK_HANDLER_KEY, mechanism)
        if hook is not None and mechanism != OAUTHBEARER:
            raise SaslConfigError(f"Invalid value for configuration "
                                  f"{listener_key(listener, CALLBACK_HANDLER_KEY, mechanism)}: minibroker "
                                  "takes a server callback handler for OAUTHBEARER only")
    hook, hook_spec, oauth_options = None, None, {}
    if OAUTHBEARER in offered:
        hook_spec = cfg.listener_override(listener, CALLBACK_HANDLER_KEY, OAUTHBEARER)
        if hook_spec is not None:
            try:
                hook = load_hook(hook_spec)
            except ValueError as e:
                key = listener_key(listener, CALLBACK_HANDLER_KEY, OAUTHBEARER)
                raise SaslConfigError(f"Invalid value {hook_spec!r} for configuration {key}: {e}") from None
        else:
            entries = _jaas(cfg, listener, OAUTHBEARER) or []
            oauth_options = module_options(entries, OAUTHBEARER_LOGIN_MODULE) or {}
            try:
                unsecured_validator_options(oauth_options)
            except ValueError as e:
                raise SaslConfigError(f"Invalid value for configuration "
                                      f"{listener_key(listener, JAAS_KEY, OAUTHBEARER)}: {e}") from None
    max_reauth = {m: max(0, cfg.for_listener(listener, REAUTH_KEY, m)) for m in offered}
    return SaslListenerSettings(listener, offered, users, hook, hook_spec, oauth_options, max_reauth,
                                cfg.for_listener(listener, "sasl.server.max.receive.size"))


def sasl_listener_settings(cfg, *, warn: bool = True) -> dict[str, SaslListenerSettings]:
    """Settings of every SASL_PLAINTEXT and SASL_SSL listener, by listener name; raises SaslConfigError.
    load_config (minibroker/config/broker.py) calls it (``warn=False``) so that a bad one is a configuration
    error."""
    protocols = cfg.security_protocol_map()
    return {lst.name: listener_settings(cfg, lst.name, warn=warn) for lst in cfg.listener_endpoints()
            if protocols.get(lst.name) in SASL_PROTOCOLS}


def _quiet(*args) -> None:
    pass
