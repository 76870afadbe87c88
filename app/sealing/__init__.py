"""Encryption at rest: the frame format and the keys (docs/encryption.md).

The lowest layer: nothing here imports the rest of the app. `layout` is
arithmetic only; `frames` and `keys` import `cryptography`, which costs about
9 MiB of memory, so they are imported only when keys are configured or a
sealed chunk is read.
"""

# The `chunks.seal_key_id` of a chunk wrapped under a customer key (S3 SSE-C,
# app.sealing.customer): never a master key id, which admits no "~".
CUSTOMER_KEY_ID = "~customer"
