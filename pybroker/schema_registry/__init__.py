"""A Confluent-compatible schema registry served by the broker: REST API v1, Avro, JSON Schema and Protobuf,
stored in the compacted ``_schemas`` topic. docs/schema-registry.md says what is served and how.

Modules: ``http`` (the HTTP/1.1 server), ``routes`` (the API), ``registry`` (its operations), ``state`` and
``records`` (the topic replayed), ``store`` (the topic read and written), ``types`` and ``compat`` (schemas
and compatibility per type), ``leader`` (one writer in a cluster), ``auth`` and ``validation``.
"""
