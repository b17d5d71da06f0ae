"""A small upstream MCP server with one side-effecting tool, to put behind the MCP gateway.

    python -m examples.mcp.files_server --record calls.jsonl                       # stdio
    python -m examples.mcp.files_server --record calls.jsonl --http 127.0.0.1:9000  # streamable HTTP /mcp

`delete_file` does not delete anything: it appends the call to the --record file (one JSON line per
call), so a test or a demo can see exactly which calls reached the upstream. `read_file` is harmless
and, by the gateway's default risk hint, not gated.
"""

import argparse
import json
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def build_server(record: Path) -> MCPServer:
    server = MCPServer("files")

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file (here: record the call)."""
        with record.open("a") as calls:
            calls.write(json.dumps({"tool": "delete_file", "path": path, "at": time.time()}) + "\n")
        return f"deleted {path}"

    @server.tool()
    def read_file(path: str) -> str:
        """Read a file (here: a fixed answer)."""
        return f"contents of {path}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.mcp.files_server")
    parser.add_argument("--record", required=True, help="JSON Lines file of the calls that ran")
    parser.add_argument("--http", help="HOST:PORT to serve streamable HTTP at /mcp (default: stdio)")
    args = parser.parse_args()
    server = build_server(Path(args.record))
    if args.http:
        host, _, port = args.http.rpartition(":")
        server.run("streamable-http", host=host or "127.0.0.1", port=int(port))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
