"""An aiohttp session stand-in for the tuner's requests to a server: each (method, path) answers
from a script, in order (the last answer repeated), with a status and a body or by raising. No
socket: what `vllm_http`'s calls and their callers do with each answer, tested alone."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Answer:
    status: int = 200
    body: str = ""

    @classmethod
    def json(cls, doc: Any, status: int = 200) -> Answer:
        return cls(status, json.dumps(doc))


class FakeResponse:
    def __init__(self, answer: Answer):
        self.status, self._body = answer.status, answer.body

    async def read(self) -> bytes:
        return self._body.encode()

    async def text(self) -> str:
        return self._body

    async def json(self) -> Any:
        return json.loads(self._body)


@dataclass
class Sent:
    method: str
    url: str
    kwargs: dict[str, Any]


@dataclass
class FakeSession:
    """`script`: "GET /health" -> the answers, in order; an exception instance is raised."""

    base_url: str
    script: dict[str, list[Answer | BaseException]]
    sent: list[Sent] = field(default_factory=list)

    def _request(self, method: str, url: str, **kwargs):
        session = self
        path = url.removeprefix(self.base_url)

        class Call:
            async def __aenter__(self):
                session.sent.append(Sent(method, url, kwargs))
                answers = session.script[f"{method} {path}"]
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
                if isinstance(answer, BaseException):
                    raise answer
                return FakeResponse(answer)

            async def __aexit__(self, *exc):
                return False

        return Call()

    def get(self, url: str, **kwargs):
        return self._request("GET", url, **kwargs)

    def post(self, url: str, **kwargs):
        return self._request("POST", url, **kwargs)

    async def __aenter__(self) -> FakeSession:
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    def paths(self) -> list[str]:
        return [f"{s.method} {s.url.removeprefix(self.base_url)}" for s in self.sent]
