"""Stores: the protocol every backend keeps, and the file store that ships."""

from .base import UNSET, Listing, Store
from .file import FileStore, is_orphan

__all__ = ["Store", "Listing", "FileStore", "UNSET", "is_orphan"]
