"""What leaves the database, read from the sealed trail alone: CSV and JSON Lines exports with their
signed head (`lines`, and on PostgreSQL `server_lines`, the same bytes made by the server), the
verifiable bundle (`bundles`), the evidence packet of one proposal (`evidence`), the PDF report and
packet (`pdf`, drawn by `pdf_document`), and the background jobs that make the large ones (`jobs`)."""
