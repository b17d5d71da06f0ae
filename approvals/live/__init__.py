"""The live pages: WebSocket consumers, their routing, the origin check and the shared fan-out rendering."""
