"""What a compliance reader is told matches what works: the bundle's README names the file the
download saves and the pinned-key command, the pages print that command, the metrics show one approval
rate with its base, and the PDFs wrap text at word boundaries."""

import re
import zipfile

import pytest
from django.urls import reverse
from fpdf.enums import MethodReturnValue

from audit.exports import jobs
from audit.exports.pdf_document import Document
from tests.audit.util import lifecycle, tenant_ref
from tests.factories import verified_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def decided(agent, refund_policy, requester, reviewer_a):
    return lifecycle(agent, reviewer_a)


def url(name, **kwargs):
    return reverse(f"audit:{name}", kwargs={"tenant": "acme", **kwargs})


def test_the_bundles_readme_names_the_downloaded_file_and_the_pinned_key_command(
    decided, tenant, compliance, settings
):
    settings.REVIEWER_ISSUER = "https://reviewer.example"
    job = jobs.run_export(jobs.create_export(tenant_ref(tenant), user=compliance, kind="bundle", filters={}))
    client = verified_client(compliance)
    download = client.get(url("export_download", job_id=job.id))
    filename = download["Content-Disposition"].split('filename="')[1].rstrip('"')
    with zipfile.ZipFile(jobs.export_path(job)) as bundle:
        readme = bundle.read("README.txt").decode()
    command = f"reviewer-verify {filename} --jwks https://reviewer.example/.well-known/jwks.json"
    assert command in readme
    assert str(job.id) not in readme  # the server's own file name is not the one the reader has
    assert command in client.get(url("export_job", job_id=job.id)).content.decode()


def test_the_metrics_page_shows_one_approval_rate_with_its_base(decided, compliance):
    html = verified_client(compliance).get(url("metrics")).content.decode()
    table = html[html.index("Rates by policy version") :]
    table = table[: table.index("</table>")]
    assert "Approval rate (of human decisions)" in table
    assert "(1 approved of 1 decided by people)" in table
    assert len(re.findall(r"\d+\.\d%", table)) == 2  # the approval rate and the reservation rate, no other


def _lines(pdf: Document, text: str, width: float) -> list[str]:
    return pdf.multi_cell(width, 4, text, dry_run=True, output=MethodReturnValue.LINES)


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-01T20:01:15.123456+00:00",
        "6f1c2a4e-9b3d-4c1e-8f2a-1b2c3d4e5f60",
        "payments.refund|order:1182",
    ],
)
def test_a_pdf_cell_breaks_a_long_id_only_after_its_separators(text):
    pdf = Document("wrapping")
    pdf.add_page()
    pdf.set_font(pdf.family, size=7.5)
    lines = _lines(pdf, pdf.breakable(pdf.clean(text), 24.0 - 2 * pdf.c_margin), 24.0)
    assert len(lines) > 1 and "".join(lines) == text
    for line in lines[:-1]:
        assert line[-1] in "-_:/.@=,+|" or re.search(r"\dT$", line), lines


def test_a_pdf_cell_breaks_prose_between_words():
    pdf = Document("wrapping")
    pdf.add_page()
    pdf.set_font(pdf.family, size=7.5)
    text = "Refund EUR 40.00 to order 1182 because the parcel never arrived"
    lines = _lines(pdf, pdf.breakable(pdf.clean(text), 24.0 - 2 * pdf.c_margin), 24.0)
    assert [word for line in lines for word in line.split()] == text.split()


def test_a_pdf_cell_moves_an_id_that_fits_a_line_to_the_next_one_whole_and_adds_no_hidden_character():
    pdf = Document("wrapping")
    pdf.add_page()
    pdf.set_font(pdf.family, size=7.5)
    text = "refunds@1, large-refunds@1 6f1c2a4e-9b3d-4c1e-8f2a-1b2c3d4e5f60"
    laid_out = pdf.breakable(pdf.clean(text), 30.0 - 2 * pdf.c_margin)
    lines = _lines(pdf, laid_out, 30.0)
    assert lines[:2] == ["refunds@1,", "large-refunds@1"]
    assert "".join(lines[2:]) == "6f1c2a4e-9b3d-4c1e-8f2a-1b2c3d4e5f60"  # too long for a line:
    assert len(lines) > 3 and all(line.endswith("-") for line in lines[2:-1])  # broken after separators
    assert "\u200b" not in laid_out  # copied from the PDF, the id is the id
