"""Data: federations (regions → clients → splits), benchmark generators and loaders."""

from regionfed.data.federation import ClientData, Federation

__all__ = ["ClientData", "Federation"]
