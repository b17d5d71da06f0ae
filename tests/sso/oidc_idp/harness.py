"""Start and drive the loopback OpenID Connect provider (settings.py says what it stands in for)."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from tests.examples.harness import CHECKOUT_PYTHONPATH, REPO, free_port, stop_process
from tests.waiting import wait_until


class OidcProvider:
    """django-oauth-toolkit's OIDC provider in its own process on a free loopback port, stopped by PID."""

    def __init__(self):
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="reviewer-idp-"))
        self.log_path = self.folder / "idp.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"

    def start(self, timeout: float = 30) -> "OidcProvider":
        env = {
            **os.environ,
            "PYTHONPATH": CHECKOUT_PYTHONPATH,
            "IDP_DATABASE": str(self.folder / "idp.sqlite3"),
        }
        env.pop("DJANGO_SETTINGS_MODULE", None)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.sso.oidc_idp.serve", str(self.port)],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def discovery_served() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited with {self.process.returncode}:\n{self.log()}")
            try:
                return httpx.get(self.discovery_url, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(discovery_served, "the provider's discovery document", timeout=timeout, detail=self.log)
        return self

    @property
    def discovery_url(self) -> str:
        return f"{self.issuer}/.well-known/openid-configuration"

    def stop(self) -> None:
        stop_process(self.process)

    def log(self) -> str:
        return self.log_path.read_text()[-4000:] if self.log_path.exists() else ""

    def add_user(
        self, username, *, password="idp-password", email="", groups=(), acr="", amr=(), email_verified=True
    ) -> str:
        """Create or replace a person at the provider; returns their subject (`sub`). `email_verified` is
        the claim's value as sent (any JSON value; `...` leaves the claim out)."""
        answer = httpx.post(
            f"{self.url}/_control/users",
            json={
                "username": username,
                "password": password,
                "email": email or f"{username}@acme.example",
                "groups": list(groups),
                "acr": acr,
                "amr": list(amr),
                **({} if email_verified is ... else {"email_verified": email_verified}),
            },
        )
        answer.raise_for_status()
        return answer.json()["sub"]

    def add_client(self, client_id: str, client_secret: str, redirect_uris: list[str]) -> None:
        httpx.post(
            f"{self.url}/_control/clients",
            json={"client_id": client_id, "client_secret": client_secret, "redirect_uris": redirect_uris},
        ).raise_for_status()

    def sign_in(self, authorize_url: str, username: str, password: str = "idp-password") -> str:
        """What a browser does at the provider: follow the authorization request, sign in on its form,
        and return the redirect back to the relying party (its callback URL with code and state)."""
        with httpx.Client(base_url=self.url, follow_redirects=False) as browser:
            answer = browser.get(authorize_url)
            while answer.status_code in (301, 302) and answer.headers["location"].startswith(("/", self.url)):
                location = answer.headers["location"]
                if "/login/" in location:
                    page = browser.get(location)
                    answer = browser.post(
                        location,
                        data={
                            "username": username,
                            "password": password,
                            "csrfmiddlewaretoken": browser.cookies["idp_csrftoken"],
                            "next": httpx.URL(location).params.get("next", ""),
                        },
                        headers={"Referer": str(page.url)},
                    )
                else:
                    answer = browser.get(location)
            if answer.status_code not in (301, 302):
                raise AssertionError(f"the provider answered {answer.status_code}:\n{answer.text[:2000]}")
            return answer.headers["location"]
