"""CRC-32C (Castagnoli) of many byte strings at once, with NumPy.

TFRecord frames (event files) carry ``masked_crc32c`` of their length and of
their data.  TensorBoard's TF-free reader checks them one byte at a time in
Python (~1 MB/s); checking every record of a logdir that way is too slow to
do twice.  Here all records of a batch are cut into chunks of ``CHUNK``
bytes (left-padded with zeros, which do not change a CRC computed from a
zero register), the chunks are run through the byte table side by side
(``CHUNK`` NumPy steps over all chunks), and each record's chunk CRCs are
combined by the linear map "feed CHUNK zero bytes" (four 256-entry tables).
The initial register 0xFFFFFFFF is folded into the first four data bytes
(for a reflected CRC, starting from register r equals XOR-ing r into the
first four bytes and starting from 0).  Strings shorter than four bytes go
through the byte loop.

TensorFlow-free; ``masked`` matches TensorFlow's and TensorBoard's
``masked_crc32c``.
"""

import numpy as np

_POLY = 0x82F63B78  # CRC-32C, reflected
_MASK_DELTA = 0xA282EAD8
CHUNK = 256


def _byte_table():
    table = np.zeros(256, np.uint32)
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
        table[i] = crc
    return table


_TABLE = _byte_table()
_TABLE_LIST = [int(x) for x in _TABLE]


def _feed(registers, columns):
    """Run ``registers`` (uint32 [n]) through the bytes of ``columns`` (uint8 [n, L])."""
    table = _TABLE
    for j in range(columns.shape[1]):
        registers = table[(registers ^ columns[:, j]) & 0xFF] ^ (registers >> 8)
    return registers


def _shift_tables(length):
    """Four tables giving the register after feeding ``length`` zero bytes:
    shift(r) = T0[r & 255] ^ T1[r >> 8 & 255] ^ T2[r >> 16 & 255] ^ T3[r >> 24]."""
    basis = np.array([1 << k for k in range(32)], np.uint32)
    shifted = _feed(basis, np.zeros((32, length), np.uint8))
    tables = np.zeros((4, 256), np.uint32)
    values = np.arange(256, dtype=np.uint32)
    for byte in range(4):
        for bit in range(8):
            tables[byte] ^= np.where((values >> bit) & 1 == 1, shifted[8 * byte + bit], np.uint32(0))
    return tables


_SHIFT = _shift_tables(CHUNK)


def _crc_python(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE_LIST[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c_many(buffer, starts, lengths):
    """CRC-32C of ``buffer[starts[i] : starts[i] + lengths[i]]`` for every i (uint32 array)."""
    buffer = np.frombuffer(buffer, np.uint8) if not isinstance(buffer, np.ndarray) else buffer
    starts = np.asarray(starts, np.int64)
    lengths = np.asarray(lengths, np.int64)
    out = np.zeros(len(starts), np.uint32)
    short = lengths < 4
    for i in np.nonzero(short)[0]:
        out[i] = _crc_python(buffer[starts[i]:starts[i] + lengths[i]].tobytes())
    index = np.nonzero(~short)[0]
    if not len(index):
        return out
    starts, lengths = starts[index], lengths[index]
    n_chunks = -(-lengths // CHUNK)
    first_chunk = np.concatenate([[0], np.cumsum(n_chunks)[:-1]])
    total = int(n_chunks.sum())
    # Each record right-aligned in its chunks: zeros first, its last byte last.
    padded = np.zeros(total * CHUNK, np.uint8)
    destinations = (first_chunk + n_chunks) * CHUNK - lengths
    for start, destination, length in zip(starts.tolist(), destinations.tolist(), lengths.tolist()):
        padded[destination:destination + length] = buffer[start:start + length]
    # Fold the initial register 0xFFFFFFFF into each record's first four bytes.
    for k in range(4):
        padded[destinations + k] ^= 0xFF
    columns = np.ascontiguousarray(padded.reshape(total, CHUNK).T)  # [CHUNK, chunks]
    chunk_crc = np.zeros(total, np.uint32)
    table = _TABLE
    for j in range(CHUNK):
        chunk_crc = table[(chunk_crc ^ columns[j]) & 0xFF] ^ (chunk_crc >> 8)
    # Combine: register = shift(register) ^ chunk, chunk by chunk, all records together.
    register = chunk_crc[first_chunk].copy()
    t0, t1, t2, t3 = _SHIFT
    for c in range(1, int(n_chunks.max())):
        active = np.nonzero(n_chunks > c)[0]
        r = register[active]
        shifted = t0[r & 0xFF] ^ t1[(r >> 8) & 0xFF] ^ t2[(r >> 16) & 0xFF] ^ t3[r >> 24]
        register[active] = shifted ^ chunk_crc[first_chunk[active] + c]
    out[index] = register ^ np.uint32(0xFFFFFFFF)
    return out


def masked(crc):
    """TFRecord's masking of a CRC (uint32 scalar or array)."""
    crc = np.asarray(crc, np.uint64)
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return ((rotated + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


# Below this many bytes the byte loop in Python beats the fixed cost of the
# NumPy path (CHUNK NumPy steps).
_SMALL = 2048


def masked_crc32c(data):
    """masked CRC-32C of one bytes object (an int)."""
    if len(data) < _SMALL:
        crc = _crc_python(data)
        return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
    return int(masked(crc32c_many(data, [0], [len(data)])[0]))
