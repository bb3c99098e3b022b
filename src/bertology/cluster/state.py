"""A submitted study's state, as `argo list` shows it: the Workflow's phase, its progress (Argo's count of
finished pods over all it knows of so far, "3/12") and its message. A study ends Succeeded, or Failed or
Error with its verdict: every study's exit handler puts one line naming each failed step and why into
status.message (docs/kubernetes.md, "Every study has a verdict")."""

from __future__ import annotations

from dataclasses import dataclass

FINISHED = ("Succeeded", "Failed", "Error")


@dataclass(frozen=True)
class Status:
    name: str
    phase: str  # Pending (also before the controller has seen it), Running, Succeeded, Failed or Error
    progress: str  # "3/12"; empty before the first pod
    message: str  # the verdict of a failed study; why a step waits, while it runs

    @classmethod
    def of(cls, workflow: dict) -> Status:
        status = workflow.get("status") or {}
        return cls(name=(workflow.get("metadata") or {}).get("name", ""), phase=status.get("phase") or "Pending",
                   progress=status.get("progress") or "", message=" ".join(str(status.get("message") or "").split()))

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"

    def __str__(self) -> str:
        """`Running 3/12`, with the message after a colon when there is one."""
        shown = " ".join(p for p in (self.phase, self.progress) if p)
        return f"{shown}: {self.message}" if self.message else shown
