"""A small client of a schema registry's REST API (Confluent's), for the CLI and the console: JSON over
HTTP or HTTPS with optional basic credentials, the registry's error code and message kept on failure."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class RegistryRequestError(Exception):
    """The registry refused (``error_code`` is its code) or could not be reached (``error_code`` None)."""

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


def segment(name: str) -> str:
    """A subject as one path segment (a slash in it escaped)."""
    return quote(name, safe="")


class RegistryHttpClient:
    def __init__(self, url: str, *, basic_auth: str | None = None, ca_file: str | None = None,
                 timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
        if basic_auth:
            self.headers["Authorization"] = "Basic " + base64.b64encode(basic_auth.encode()).decode()
        self.context = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.context) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read())
                raise RegistryRequestError(answer["message"], answer["error_code"]) from None
            except (ValueError, KeyError, TypeError):
                raise RegistryRequestError(f"{self.url} answered HTTP {exc.code}", exc.code) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise RegistryRequestError(f"the schema registry at {self.url} cannot be reached: {exc}") from None
