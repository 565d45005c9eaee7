"""Broker and topic configuration with Apache Kafka's property names, types, defaults and synonyms.

The bottom of the house: every layer reads configuration, and this package imports nothing of
minibroker's but ``minibroker.errors``. One module a job:

- ``keys``: the key catalogue (``BROKER_CONFIGS``, ``TOPIC_CONFIGS``, synonyms, typed values), with
  ``validators``, ``message_format`` (``message.format.version``) and ``kafka_broker_keys`` (Kafka's keys
  minibroker accepts without using them);
- ``sources``: properties files, ``KAFKA_*`` variables, ``--override``;
- ``broker``: ``BrokerConfig`` and ``load_config`` (sources layered, cross-key checks);
- ``listeners``, ``principal_rules``, ``sasl`` and ``jaas``: listener and security settings;
- ``dynamic``: what AlterConfigs may change on the broker resource;
- ``topic``: topic overrides, IncrementalAlterConfigs operations, DescribeConfigs of a topic;
- ``reference``: docs/configuration.md (imported on first use: a broker never needs it).

The names below are the package's public face (``from minibroker.config import load_config``).
Stdlib only and cheap to import: the broker's start-up time budget includes this package.
"""

from minibroker.config import broker, dynamic, keys, listeners, sources, topic
from minibroker.config.broker import *  # noqa: F403
from minibroker.config.dynamic import *  # noqa: F403
from minibroker.config.keys import *  # noqa: F403
from minibroker.config.listeners import *  # noqa: F403
from minibroker.config.sources import *  # noqa: F403
from minibroker.config.topic import *  # noqa: F403
from minibroker.config.validators import parse_host_counts

__all__ = [*broker.__all__, *dynamic.__all__, *keys.__all__, *listeners.__all__, *sources.__all__,
           *topic.__all__, "parse_host_counts", "config_reference_markdown"]  # noqa: F405 (__getattr__)


def __getattr__(name: str):
    if name == "config_reference_markdown":  # the docs generator: not imported by a starting broker
        from minibroker.config.reference import config_reference_markdown

        return config_reference_markdown
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
