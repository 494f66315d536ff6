"""What `specpilot check` returns: findings and the launch as the engine would run it."""

from __future__ import annotations

from dataclasses import dataclass, field

from specpilot.engines.rules import Finding
from specpilot.secrets import secret_values


@dataclass
class CheckResult:
    ok: bool
    findings: list[Finding]
    effective_args: list[str]
    effective_env: dict[str, str]
    engine: str = ""
    version: str = ""
    #: every flag's value after the engine's adjustments (dest -> value), for the planner
    effective_values: dict[str, object] = field(default_factory=dict)
    #: the dests the user set (the rest of `effective_values` are defaults or adjustments)
    given: frozenset[str] = frozenset()
    #: the rules whose condition read a model fact (class, hybrid layers, MTP layers, context)
    model_rules: tuple[str, ...] = ()
    #: False when the model's config.json could not be read: `model_rules` ran on no model
    model_read: bool = True

    def fix_secrets(self) -> list[str]:
        """The values its fixes move onto a secret flag or variable (a mistyped `--api-kye sk-...`
        renamed to --api-key): as secret as that flag's, though the spec gives them under no secret name."""
        return [v for f in self.findings if f.fix for v in secret_values(f.fix.env, f.fix.args)]

    @property
    def model_rules_not_run(self) -> int:
        """How many rules asked the model and got no answer."""
        return 0 if self.model_read else len(self.model_rules)

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "engine": self.engine,
            "engine_version": self.version,
            "findings": [f.to_json() for f in self.findings],
            "effective_args": self.effective_args,
            "effective_env": self.effective_env,
            "model_read": self.model_read,
            "model_rules_not_run": self.model_rules_not_run,
        }
