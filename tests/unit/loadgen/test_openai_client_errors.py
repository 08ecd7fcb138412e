"""The `openai` client classifies a stream cut short by the transport as truncated, whichever
HTTP library the SDK is built on (httpx, or httpx2 in later SDKs)."""

import asyncio
import importlib

import openai

from loadgen.openai_client import OpenAIClient, sdk_http_library
from loadgen.request_record import CONNECTION, TRUNCATED, RequestRecord

# What the SDK's streams raise, found independently of the client's own lookup.
SDK_HTTP = importlib.import_module(type(openai.DEFAULT_CONNECTION_LIMITS).__module__.split(".")[0])


def _client(create) -> OpenAIClient:
    client = OpenAIClient("http://127.0.0.1:1", "completions", request_timeout_s=5.0)
    client._openai, client._httpx = openai, sdk_http_library(openai)  # what __aenter__ sets
    client._create = create
    return client


def _cut_short(after_chunks: int):
    async def create(**kwargs):
        async def stream():
            for _ in range(after_chunks):
                yield _Chunk()
            raise SDK_HTTP.RemoteProtocolError("peer closed connection without sending complete message body")

        return stream()

    return create


class _Choice:
    text = "x"


class _Chunk:
    choices = (_Choice(),)
    usage = None


def _send(client: OpenAIClient) -> RequestRecord:
    rec = RequestRecord(index=0, class_name="c", scheduled_time=0.0, expected_prompt_tokens=4, expected_output_tokens=8)
    asyncio.run(client.send({}, rec))
    return rec


def test_a_stream_cut_by_the_transport_after_tokens_is_truncated():
    rec = _send(_client(_cut_short(after_chunks=2)))
    assert rec.error_kind == TRUNCATED, rec.error_text
    assert len(rec.chunk_times) == 2  # the tokens that came stay measured


def test_a_transport_error_before_any_answer_is_a_connection_error():
    async def refused(**kwargs):
        raise SDK_HTTP.ConnectError("connection refused")

    assert _send(_client(refused)).error_kind == CONNECTION
