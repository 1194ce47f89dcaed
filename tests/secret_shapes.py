"""Secrets and personal identifiers of the shapes stretto.logs.sensitive knows, for the tests
of `stretto redact`, `ingest --redact` and the proxy's header (issue 40, items 2 and 7).
Made up: random bodies in each provider's format (none is a real credential)."""

from __future__ import annotations

_PEM_BODY = (
    "u5WTNX1PE9a0qBY+DK+7Yfc8HFzPmgCPCYu3d4KKDstF2eKEEMiSBjnvC30BUen8\n"
    "p6hZ4WGtESFwgtqPA9CylSHz/aHd0MYwcDUGTS+NZB9+Zj6nTISqQ15gxvQurRGH\n"
    "wLcLNpkKnWKM7J8zLcyqMTSNKGQU=="
)
_OPENSSH_BODY = (
    "Q0qhaU1ao2/uRKX1qmV6KlBDq8f+UDv7Q/Gq+PFwkrc5T5wAt9mSKc07467U9kvL\n"
    "uuFYChHNuoivmEXUFDxKjJboyM24M/3cGhkNUcx/hQAkiE1EB3NI/S6p93AtLBFr\n"
    "GOEeELntL5/XpSVA/D1/9Itw4sg/=="
)
_EC_BODY = (
    "RPfitrv4eiJKlaOcX180S1rzfeGn7G7UMS1VX2q+0uLZRP/+8eSdv85+PLY8GbpJ\n"
    "hJSlIC2atXmY6+JkrTmGYk2yQdQw=="
)


def _pem(kind: str, body: str) -> str:
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{body}\n-----END {kind}PRIVATE KEY-----"


# (name, the value as it is passed, the parts of it that must never be found again)
SECRETS: list[tuple[str, str, list[str]]] = [
    (name, value, leaks or [value])
    for name, value, leaks in [
        ("github classic", "ghp_DL4HcpsQ9OQniWwr4VC0bH5VidPmNTD29dlY", []),
        ("github fine-grained", "github_pat_11MUHQ9UJYGR1H4GA4D10U_UWvoVjtkHtS0sDYk5LnFBHekLnM"
         "YLafDNthm1pDDgEO83vN7Ds2I6KYpe9c", []),
        ("github oauth", "gho_ZjMylY8UCg1UAmLbAEH6p5oCYZUmkkt9qQfl", []),
        ("github app", "ghs_ZvkXpdpldZGpnARBEttGpcZOWz8Wc0kP2ktW", []),
        ("gitlab", "glpat-dMUY2PeG8GcBfUKoedNc", []),
        ("slack bot", "xoxb-412299005359-6702407137747-oCMYyvJ673C7U10EbmB1xPSj", []),
        ("slack user", "xoxp-660839002851-385695039122-969113671014-"
         "907fb4d72c521e7ec39ff7f49febd713", []),
        ("slack webhook", "https://hooks.slack.com/services/"
         "TEIAHFMSO/BPFT61TPK/zlSEmEAYteSakhB9T0Sx9EAR",
         ["TEIAHFMSO/BPFT61TPK/zlSEmEAYteSakhB9T0Sx9EAR", "zlSEmEAYteSakhB9T0Sx9EAR"]),
        ("aws access key", "AKIAMVUYIG1FRBDXNIU1", []),
        ("aws secret key", "p8P69UA8FRzR7wfH/4whsYMYsvNdzg+uxx2uIjYP", []),
        ("openai", "sk-proj-bUR4vImmUF6hYdrCFF7Cyg4-5Vcv4tGxMp-zU57FBhzIN-kl", []),
        ("anthropic", "sk-ant-api03-Dag3H4Cl-g73BK1Nk_oy9mL62OmqdcYjn6Zd363S0vaO7Isma6r"
         "Mq9vU0T1G1v84NDAmP2Eu0D_XYwFsOyOqs9G6rAJVnAA", []),
        ("stripe secret", "sk_live_m3I1xaWAFc2Zsb37ZcyAxoQK", []),
        ("stripe restricted", "rk_live_TUiXy8k61SSiMvzUvDXb2k9A", []),
        ("google api", "AIzaapvi5johwgmf17JQTohWIhpraQulWWBoXlt", []),
        ("google oauth", "ya29.TFUN55HIorbZkZTwg45iNJQ-cmmz8IhkGmKm2uyh", []),
        ("jwt", "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9.eyJzdWIiOiAiMTIzNDU2Nzg5MCIsICJuYW1lIjog"
         "IkFkYSIsICJpYXQiOiAxNTE2MjM5MDIyfQ.O9_lCq9K2ZLxgE5yDEmBibnJEovYAOhoT7L1ccKE13c", []),
        ("rsa private key", _pem("RSA ", _PEM_BODY), _PEM_BODY.split("\n")),
        ("openssh private key", _pem("OPENSSH ", _OPENSSH_BODY), _OPENSSH_BODY.split("\n")),
        ("ec private key", _pem("EC ", _EC_BODY), _EC_BODY.split("\n")),
        ("twilio", "SKb3215bab36cbd43af1f47c12f020d4d5", []),
        ("sendgrid", "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", []),
        ("telegram bot", "523984897:AA0KYj074SwpTMTEEp_qav15nvoiXJUCDNN", []),
        ("mailgun", "key-16ee0d81b6d2ee25cc38fad6d2d812a3", []),
        ("mailchimp", "0a2ab4ab87e40043ee91c502371030ce-us14", []),
        ("npm", "npm_7onmhxVBntcVsJYMYrWaqzKf4qdFa4Wlilib", []),
        ("pypi", "pypi-AgEIcHlwaS5vcmca2E5-eQJma5UkTWEkryyYsDs5GNoRVTAaYOH88GsBgqq0HQRIEYd_3TDHwbt",
         []),
        ("hugging face", "hf_ViGmUoBpHNuq2hneIwhrwjwtWDbOk9YrR0", []),
        ("discord bot", "Mjy8ebGed7dZH4r73fhs-1up.wWk6IQ.91osb3-i9FMikTM7-U-LnfjVt9C", []),
        ("square", "sq0atp-2tEJP8Z0p4wsvW-eQqNVAj", []),
        ("shopify", "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", []),
        ("digitalocean", "dop_v1_e3c6d0ce4f9c157e1689e6593aeeb1e5"
         "cacace4ea82ef6c138e1dc0046dd5a9d", []),
        ("databricks", "dapi631e2d44722d36498b90c873ab8f91a4", []),
        ("postman", "PMAK-b38c5f0b407a6c09411502c0-2736032a4465dc8a09aa2cc4e3780abe8d", []),
        ("linear", "lin_api_AwPVVWgUaVJldwUVcJHFAaLyNaSYIBqb0lrRxG88", []),
        ("basic auth url", "https://deploy:wZJ1xFHb6Lt7rNitQp@git.example.org/repo.git",
         ["wZJ1xFHb6Lt7rNitQp"]),
    ]
]  # fmt: skip

PERSONAL: list[tuple[str, str, list[str]]] = [
    ("email", "margarethe.vandersloot@example.org", ["margarethe.vandersloot@example.org"]),
    ("international phone", "+44 7700 900123", ["+44 7700 900123", "7700 900123"]),
    ("north american phone", "(415) 555-0132", ["(415) 555-0132", "555-0132"]),
    ("card, spaced", "4111 1111 1111 1111", ["4111 1111 1111 1111"]),
    ("card", "5555555555554444", ["5555555555554444"]),
    ("iban, spaced", "GB82 WEST 1234 5698 7654 32", ["GB82 WEST 1234 5698 7654 32"]),
    ("iban", "DE89370400440532013000", ["DE89370400440532013000"]),
    ("ipv4", "203.0.113.77", ["203.0.113.77"]),
    ("ipv6", "2001:db8:85a3::8a2e:370:7334", ["2001:db8:85a3::8a2e:370:7334"]),
    ("ssn", "123-45-6789", ["123-45-6789"]),
]
