"""Blocking requests, each on a fresh connection (`http.client`): for the thread that starts or
keeps a server, which has no event loop. `exchange` is also the request behind a live
reconfiguration (`serving.process.reconfiguration` owns that route and its protocol)."""

from __future__ import annotations

import http.client
import json
from typing import Any

from vllm_http.endpoints import HEALTH, Unanswered


def exchange(
    host: str, port: int, method: str, path: str, *, json_body: Any = None, timeout_s: float
) -> tuple[int, bytes]:
    """One blocking request on a fresh connection: (status, body), or `Unanswered`."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        if json_body is None:
            conn.request(method, path)
        else:
            conn.request(method, path, body=json.dumps(json_body), headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as e:
        raise Unanswered(str(e)) from e
    finally:
        conn.close()


def healthy(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """Whether the server answers `GET /health` with 200."""
    try:
        status, _ = exchange(host, port, "GET", HEALTH, timeout_s=timeout_s)
    except Unanswered:
        return False
    return status == 200
