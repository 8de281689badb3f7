from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetBlocksRequest(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[GetBlockRequest]
    def __init__(self, blocks: _Optional[_Iterable[_Union[GetBlockRequest, _Mapping]]] = ...) -> None: ...

class GetBlocksResponse(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: _containers.RepeatedCompositeFieldContainer[GetBlockResponse]
    def __init__(self, blocks: _Optional[_Iterable[_Union[GetBlockResponse, _Mapping]]] = ...) -> None: ...

class GetBlockRequest(_message.Message):
    __slots__ = ("bucket", "key", "etag", "size", "block_size", "index")
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    ETAG_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    bucket: str
    key: str
    etag: str
    size: int
    block_size: int
    index: int
    def __init__(self, bucket: _Optional[str] = ..., key: _Optional[str] = ..., etag: _Optional[str] = ..., size: _Optional[int] = ..., block_size: _Optional[int] = ..., index: _Optional[int] = ...) -> None: ...

class GetBlockResponse(_message.Message):
    __slots__ = ("data", "crc32", "block_key")
    DATA_FIELD_NUMBER: _ClassVar[int]
    CRC32_FIELD_NUMBER: _ClassVar[int]
    BLOCK_KEY_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    crc32: int
    block_key: bytes
    def __init__(self, data: _Optional[bytes] = ..., crc32: _Optional[int] = ..., block_key: _Optional[bytes] = ...) -> None: ...
