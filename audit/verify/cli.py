"""`python -m audit.verify`: the command line over verify_bundle and verify_export (see audit/verify/chains.py
for what is checked). Exit status: 0 verified, 1 a problem was found, 2 the bundle is unreadable."""

import argparse
import io
import json
import sys
import zipfile

from .bundle import BundleError, read_manifest, verify_bundle
from .export import verify_export


def _describe(manifest: dict) -> list[str]:
    lines = []
    tenant = manifest.get("tenant") or {}
    period = manifest.get("period") or {}
    lines.append(
        f"bundle of {tenant.get('slug', '?')} exported {manifest.get('created_at')} by "
        f"{manifest.get('created_by')} from {manifest.get('issuer')}"
    )
    lines.append(f"period: {period.get('since') or 'start'} .. {period.get('until') or 'export time'}")
    for segment in manifest.get("chains", []):
        lines.append(
            f"{segment['chain']}: events {segment['first_seq']}..{segment['last_seq']}, "
            f"head at export {segment['head']['seq']}"
        )
    return lines


def load_jwks(source: str) -> dict:
    """A JWKS document from a file or an http(s) URL."""
    if source.startswith(("https://", "http://")):
        from urllib.request import urlopen

        with urlopen(source, timeout=30) as response:  # noqa: S310 (the scheme is checked just above)
            return json.load(response)
    with open(source, "rb") as file:
        return json.load(file)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="reviewer-verify" if __package__ == "reviewer_verify" else "python -m audit.verify",
        description="Verify a Reviewer audit bundle offline (no database, no Django).",
    )
    parser.add_argument(
        "bundle", help="the bundle zip exported by Reviewer, or a CSV / JSON Lines export (needs --jwks)"
    )
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--jwks",
        metavar="FILE_OR_URL",
        help="the public keys you trust: a JWKS file (e.g. saved from Reviewer's /.well-known/jwks.json) "
        "or its https URL",
    )
    keys.add_argument(
        "--trust-bundle-keys",
        action="store_true",
        help="use the keys inside the bundle: proves the bundle is intact, not who wrote it",
    )
    parser.add_argument(
        "--previous", help="an earlier bundle of the same tenant: the chain must still hold it"
    )
    args = parser.parse_args(argv)
    if not args.jwks and not args.trust_bundle_keys:
        parser.error(
            "the signing keys are not pinned: pass --jwks FILE_OR_URL with the keys you trust "
            "(e.g. https://reviewer.example/.well-known/jwks.json), or --trust-bundle-keys to accept the "
            "keys inside the bundle (which proves integrity, not authorship)"
        )
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="replace", line_buffering=True)
    jwks = None
    if args.jwks:
        # The keys first, with their own message: an unreachable JWKS URL is not a broken bundle.
        try:
            jwks = load_jwks(args.jwks)
        except (OSError, ValueError) as error:
            print(f"cannot read the keys from {args.jwks}: {error}", file=out)
            return 2
    if not zipfile.is_zipfile(args.bundle):
        return _main_export(args, jwks, out)
    try:
        with zipfile.ZipFile(args.bundle) as bundle:
            description = _describe(read_manifest(bundle))
        result = verify_bundle(args.bundle, jwks=jwks, previous=args.previous)
    except (BundleError, OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
        print(f"cannot read the bundle: {error}", file=out)
        return 2
    for line in description + result.notes:
        print(line, file=out)
    for problem in result.problems:
        print(f"problem: {problem}", file=out)
    print(result.summary(), file=out)
    return 0 if result.ok else 1


def _main_export(args, jwks: dict | None, out) -> int:
    """A CSV or JSON Lines export: it carries no keys, so only --jwks can pin them."""
    if jwks is None:
        print(
            "an export carries no keys: pass --jwks FILE_OR_URL with the keys you trust "
            "(e.g. https://reviewer.example/.well-known/jwks.json)",
            file=out,
        )
        return 2
    try:
        result = verify_export(args.bundle, jwks=jwks)
    except (BundleError, OSError, ValueError, KeyError, TypeError) as error:
        print(f"cannot read the export: {error}", file=out)
        return 2
    for line in result.notes:
        print(line, file=out)
    for problem in result.problems:
        print(f"problem: {problem}", file=out)
    print(result.summary(), file=out)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
