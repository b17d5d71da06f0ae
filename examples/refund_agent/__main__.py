"""`python -m examples.refund_agent --port 8001 --reviewer-url http://127.0.0.1:8000 --api-token ...`"""

import logging

import uvicorn

from examples.refund_agent.app import build_app
from examples.refund_agent.config import parse_settings


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if not settings.api_token:
        logging.getLogger("examples.refund_agent").warning(
            "no --api-token: Reviewer will refuse proposals, consume and outcome calls"
        )
    uvicorn.run(
        build_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower()
    )


if __name__ == "__main__":
    main()
