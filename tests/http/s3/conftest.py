from __future__ import annotations

import pytest

from tests.http.s3.helpers import CapturingClient, boto3_client, freeze_botocore
from tests.http.s3.test_api_boto3 import ACCESS_KEY, SECRET
from tests.running_service import Service, ServiceFactory


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs at ``helpers.NOW``."""
    freeze_botocore(monkeypatch)


@pytest.fixture
def s3(frozen: None) -> CapturingClient:
    """A boto3 client (SigV4 everywhere, path style, plain HTTP) whose requests are captured."""
    return boto3_client(signature_version="s3v4")


@pytest.fixture
async def s3_service(start_service: ServiceFactory) -> Service:
    """A running service with the S3 API on (one access key, test_api_boto3's)."""
    return await start_service(s3_credentials={ACCESS_KEY: SECRET})
