"""The enrollment QR code, drawn inline as SVG by segno (no image file, no JavaScript)."""

import segno
from django.utils.safestring import SafeString, mark_safe

TITLE = "QR code that adds your Reviewer account to an authenticator app"


def qr_svg(data: str) -> SafeString:
    """An <svg> of the QR code of `data`, sized by CSS (.qr). Safe to insert: segno writes the markup from
    the code's modules, and the only text in it is TITLE, which segno escapes. `data` (the otpauth URI
    with the secret) appears nowhere but in the drawing."""
    svg = segno.make(data, error="m").svg_inline(
        scale=1,
        border=4,
        omitsize=True,
        svgclass="qr",
        lineclass=None,
        dark="#000",
        light="#fff",
        title=TITLE,
    )
    return mark_safe(svg)  # noqa: S308 (segno's own markup, see above)
