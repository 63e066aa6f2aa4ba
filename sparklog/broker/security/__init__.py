"""The broker's security: listener security settings, TLS, SASL, SCRAM credentials, ACLs.

The API handlers that speak it (SaslHandshake, SaslAuthenticate, the SCRAM credential and
ACL APIs) live beside the other handlers in ``sparklog.broker``; this package holds what
they and the server share.
"""
