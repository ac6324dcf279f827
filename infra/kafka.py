"""Kafka connection security (TLS, SASL) from :class:`KafkaSettings`: one builder for every client.

:func:`client_options` gives aiokafka's keyword arguments (agents, sink, admin, readers); the
worker hands the same options to Faust (:func:`streams.worker.app.broker_credentials`)."""

from __future__ import annotations

import ssl
from typing import Any

from infra.settings import KafkaSettings


def client_options(kafka: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments for any aiokafka client: security protocol, SSL context, SASL."""
    opts: dict[str, Any] = {"security_protocol": kafka.security_protocol}
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        context = ssl.create_default_context(
            cafile=str(kafka.ssl_cafile) if kafka.ssl_cafile else None
        )
        if kafka.ssl_certfile:
            context.load_cert_chain(
                str(kafka.ssl_certfile), str(kafka.ssl_keyfile) if kafka.ssl_keyfile else None
            )
        opts["ssl_context"] = context
    if kafka.security_protocol.startswith("SASL"):
        opts["sasl_mechanism"] = kafka.sasl_mechanism or "PLAIN"
        opts["sasl_plain_username"] = kafka.sasl_username
        opts["sasl_plain_password"] = (
            kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
        )
    return opts
