"""The store's shared botocore configuration and error mapping (no server needed)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from rljob.checkpoint_protocol.errors import (
    BucketNotFound,
    ObjectNotFound,
    PreconditionFailed,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from rljob.checkpoint_protocol.s3.transport import (
    ClientCache,
    StoreCredentials,
    StoreEndpoint,
    client_config,
    translate_error,
)


def test_shared_config() -> None:
    config = client_config("path")
    assert config.request_checksum_calculation == "when_required"
    assert config.response_checksum_validation == "when_required"
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.connect_timeout and config.read_timeout
    assert config.s3 == {"addressing_style": "path"}
    assert client_config("path") is config  # one per addressing style


def test_one_client_per_endpoint_and_credentials() -> None:
    cache = ClientCache()
    creds = StoreCredentials("a", "b")
    one = StoreEndpoint("http://127.0.0.1:1", "us-east-1", "path", creds)
    assert cache.client(one) is cache.client(
        StoreEndpoint("http://127.0.0.1:1", "us-east-1", "path", StoreCredentials("a", "b"))
    )
    assert cache.client(one) is not cache.client(
        StoreEndpoint("http://127.0.0.1:1", "us-east-1", "path", StoreCredentials("a", "c"))
    )
    assert "b" not in repr(creds)


def test_clients_share_one_session_and_keep_their_own_credentials() -> None:
    cache = ClientCache()
    first, second = (
        cache.client(StoreEndpoint(f"http://127.0.0.1:{port}", "us-east-1", "path", creds))
        for port, creds in ((1, StoreCredentials("a", "b")), (2, StoreCredentials("c", "d")))
    )
    keys = [client._request_signer._credentials.access_key for client in (first, second)]
    assert keys == ["a", "c"]
    # One session: botocore's parsed models (about 11 MiB) are shared, not loaded per endpoint.
    assert first._loader is second._loader


def test_endpoint_from_env() -> None:
    endpoint = StoreEndpoint.from_env(
        {
            "RLJOB_S3_ENDPOINT": "http://127.0.0.1:9000",
            "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "key",
            "AWS_SECRET_ACCESS_KEY": "secret",
        }
    )
    assert (endpoint.url, endpoint.region, endpoint.addressing_style) == (
        "http://127.0.0.1:9000",
        "eu-west-1",
        "path",
    )
    assert endpoint.credentials == StoreCredentials("key", "secret")
    ambient = StoreEndpoint.from_env({})
    assert (ambient.url, ambient.credentials, ambient.addressing_style) == (None, None, "auto")


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        pytest.param(
            EndpointConnectionError(endpoint_url="http://x"), StoreUnavailable, id="refused"
        ),
        pytest.param(
            ReadTimeoutError(endpoint_url="http://x"), StoreUnavailable, id="read-timeout"
        ),
        pytest.param(_client_error("SlowDown", 503), StoreUnavailable, id="throttled"),
        pytest.param(_client_error("InternalError", 500), StoreUnavailable, id="5xx"),
        pytest.param(_client_error("AccessDenied", 403), StoreAccessDenied, id="denied"),
        pytest.param(_client_error("InvalidAccessKeyId", 403), StoreAccessDenied, id="bad-key"),
        pytest.param(_client_error("NoSuchBucket", 404), BucketNotFound, id="no-bucket"),
        pytest.param(_client_error("NoSuchKey", 404), ObjectNotFound, id="no-key"),
        pytest.param(_client_error("PreconditionFailed", 412), PreconditionFailed, id="412"),
        pytest.param(
            _client_error("ConditionalRequestConflict", 409), PreconditionFailed, id="409-conflict"
        ),
        pytest.param(_client_error("NotImplemented", 501), StoreError, id="not-implemented"),
        pytest.param(_client_error("BucketNotEmpty", 409), StoreError, id="other-409"),
    ],
)
def test_translate_error(exc: Exception, expected: type[StoreError]) -> None:
    translated = translate_error(exc, "PutObject s3://b/k")
    assert type(translated) is expected
    assert str(translated).startswith("PutObject s3://b/k")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        pytest.param("AccessDenied", 403, "PutObject s3://b/k: HTTP 403 AccessDenied", id="a-code"),
        pytest.param("<html>secret</html>", 400, "PutObject s3://b/k: HTTP 400", id="not-a-code"),
        pytest.param("", 502, "PutObject s3://b/k: HTTP 502", id="no-code"),
    ],
)
def test_only_the_status_and_an_error_code_of_the_store_are_kept(
    code: str, status: int, expected: str
) -> None:
    error = ClientError(
        {
            "Error": {"Code": code, "Message": "secret body"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "PutObject",
    )
    assert str(translate_error(error, "PutObject s3://b/k")) == expected
