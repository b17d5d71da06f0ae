"""`python -m reviewer_gate.resource jwk resource-key.pem`: print the public JWK of the resource's
challenge-signing key (made, mode 0600, when the file does not exist yet), for Reviewer's
`register_resource --jwk-file`. The private key never leaves the file."""

from __future__ import annotations

import argparse
import json

from reviewer_gate.resource.challenge import ResourceKey


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reviewer_gate.resource", description=__doc__)
    parser.add_argument("command", choices=["jwk"])
    parser.add_argument("key_file", help="the resource's Ed25519 private key (PKCS#8 PEM)")
    args = parser.parse_args(argv)
    print(json.dumps(ResourceKey.from_file(args.key_file, create=True).jwk(), indent=2))  # noqa: T201 - the command's output


if __name__ == "__main__":
    main()
