"""Security beside the network layer: who a connection is (principals), how it proves it (TLS, SASL),
what it may do (the ACL authorizer) and how fast (client quotas). docs/security.md is the user's guide."""
