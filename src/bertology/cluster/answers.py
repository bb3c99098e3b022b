"""A cluster's refusals as one line each, of the kind the `bertology` command exits with: what the server
said and its HTTP status, as BadInput (4xx but 401 and 403: the request was wrong), a failure (401, 403: no
right to do it) or Transient (429, 5xx, an unreachable server: try again)."""

from __future__ import annotations

import json

from bertology.errors import BadInput, BertologyError, Transient, choices

LISTED = 20  # names a "not found" line lists at most


def refused(status: int, body: object, reason: object, doing: str, where: str) -> BertologyError:
    """The server's answer to a request it refused (status 0: the clients' own word for no answer, a TLS
    failure among them)."""
    if not status:
        return unreachable(RuntimeError(str(reason)), where)
    message = reason
    try:
        message = json.loads(body).get("message") or reason
    except (TypeError, ValueError, AttributeError):
        pass
    text = f"{where} refused to {doing}: {' '.join(str(message).split())} (HTTP {status})"
    if status == 429 or status >= 500:
        return Transient(text)
    if status in (401, 403):
        return BertologyError(text)
    return BadInput(text)


def unreachable(error: Exception, where: str) -> BertologyError:
    """A request that got no answer: a TLS certificate this machine cannot verify is a setting to change, any
    other failure (refused, reset, timed out) is worth a retry."""
    reason = str(getattr(error, "reason", None) or error)
    if "CERTIFICATE_VERIFY_FAILED" in reason or "SSLCertVerificationError" in reason:
        return BadInput(f"cannot verify the TLS certificate of {where} ({' '.join(reason.split())}); a self-signed "
                        f"Argo Server: ARGO_INSECURE_SKIP_VERIFY=true, as for the argo CLI")
    return Transient(f"cannot reach {where}: {' '.join(reason.split())}")


def not_found(name: str, namespace: str, names: list[str], where: str) -> BadInput:
    """No Workflow of that name: one line naming the closest of the namespace's Workflows."""
    shown = sorted(names)
    listed = ", ".join(shown[:LISTED]) + (f", … ({len(shown)} in all)" if len(shown) > LISTED else "")
    return BadInput(f"no Workflow '{name}' in namespace '{namespace}' on {where} "
                    f"({choices(name, shown, 'Workflows there', listed or None)})")
