"""CRC-32C (Castagnoli) of event-file records, by google-crc32c.

TFRecord frames (event files) carry ``masked_crc32c`` of their length and of
their data; ``masked`` matches TensorFlow's and TensorBoard's masking.
google-crc32c computes the CRC in C (hardware CRC32 instructions where the
CPU has them); ``crc32c_many`` checks a batch of records of one buffer,
``Crc32c`` continues a CRC over pieces (a record too long to hold is checked
a block at a time).  TensorFlow-free.
"""

import google_crc32c
import numpy as np

_MASK_DELTA = 0xA282EAD8


def crc32c_many(buffer, starts, lengths):
    """CRC-32C of ``buffer[starts[i] : starts[i] + lengths[i]]`` for every i (uint32 array)."""
    data = buffer.tobytes() if isinstance(buffer, np.ndarray) else bytes(buffer)
    value = google_crc32c.value
    return np.fromiter(
        (value(data[start:start + length]) for start, length in zip(np.asarray(starts).tolist(),
                                                                     np.asarray(lengths).tolist())),
        np.uint32, count=len(starts))


class Crc32c:
    """A CRC-32C computed over pieces: ``update(piece)`` in order, then ``value()``."""

    __slots__ = ("crc", "length")

    def __init__(self):
        self.crc = 0
        self.length = 0

    def update(self, data):
        data = data.tobytes() if isinstance(data, np.ndarray) else bytes(data)
        if data:
            self.crc = google_crc32c.extend(self.crc, data)
            self.length += len(data)
        return self

    def value(self):
        return self.crc

    def masked(self):
        return int(masked(self.value()))


def masked(crc):
    """TFRecord's masking of a CRC (uint32 scalar or array)."""
    crc = np.asarray(crc, np.uint64)
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return ((rotated + _MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


def masked_crc32c(data):
    """masked CRC-32C of one bytes object (an int)."""
    crc = google_crc32c.value(bytes(data))
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
