from __future__ import annotations

import pytest

from tests.s3.helpers import CapturingClient, boto3_client, freeze_botocore


@pytest.fixture
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs at ``helpers.NOW``."""
    freeze_botocore(monkeypatch)


@pytest.fixture
def s3(frozen: None) -> CapturingClient:
    """A boto3 client (SigV4 everywhere, path style, plain HTTP) whose requests are captured."""
    return boto3_client(signature_version="s3v4")
