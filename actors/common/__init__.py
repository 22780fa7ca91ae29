"""What every actor shares: declarations, the request context, ports, text extraction. Imports no actor."""
