"""Parquet as the store writes and reads it: zstd with page checksums on write, the checksums verified on
read, so a table damaged at rest raises `Damaged` (and is rebuilt) instead of a reader's traceback."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq

from bertology.store.errors import Damaged


def parquet_bytes(table: pa.Table) -> bytes:
    """A table as the store writes Parquet: zstd, with page checksums."""
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd", write_page_checksum=True)
    return buf.getvalue()


def parse_parquet(data: bytes, where: str) -> pa.Table:
    """A Parquet file read whole, page checksums verified where the writer wrote them; an emptied or
    truncated file raises Damaged (naming it) instead of a reader's traceback."""
    try:
        return pq.read_table(io.BytesIO(data), page_checksum_verification=True)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise Damaged(where, f"unreadable Parquet, {len(data)} bytes: {str(e)[:120]}") from None
