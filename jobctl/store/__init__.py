"""Stores: the protocol every backend keeps, and the file store that ships."""

from typing import TYPE_CHECKING

from ..record import is_orphan
from .base import UNSET, Listing, OpenListing, Store
from .file import FileStore
from .location import open_store

__all__ = ["Store", "Listing", "OpenListing", "FileStore", "UNSET", "is_orphan", "open_store"]

if TYPE_CHECKING:  # mypy proves each store keeps the whole protocol
    from .postgres import PostgresStore

    _file_store_is_a_store: Store = FileStore(".")
    _postgres_store_is_a_store: Store = PostgresStore("")
