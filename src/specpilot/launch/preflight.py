"""The one place `up` calls into other concerns: check and plan."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from specpilot.check.resolved import ResolvedSpec
from specpilot.engines.adapter import EngineRelease
from specpilot.engines.fix import Fix
from specpilot.plan import Plan, make_plan
from specpilot.secrets import is_secret_flag, url_passwords
from specpilot.spec import Spec

#: the flag naming a YAML file of server flags (SGLang and vLLM both read one)
CONFIG_FILE_FLAG = "--config"


@dataclass(frozen=True)
class Preflight:
    """What check and plan said before anything started."""

    plan: Plan | None = None
    errors: list[str] = field(default_factory=list)  # refuse unless --force
    warnings: list[str] = field(default_factory=list)
    cause: str | None = None  # "config" (check) or "oom" (plan does not fit)
    fix: Fix | None = None
    #: flags `up` adds to the launch (warnings whose fix it applies), each with why
    added: list[tuple[tuple[str, ...], str]] = field(default_factory=list)


def launch_spec(spec: Spec, pre: Preflight) -> Spec:
    """The spec `up` starts: `[engine] args` plus the flags preflight adds (shipped and verified as such)."""
    added = [arg for args, _ in pre.added for arg in args]
    if not added:
        return spec
    return spec.model_copy(
        update={"engine": spec.engine.model_copy(update={"args": [*spec.engine.args, *added]})}
    )


def argv_secret_warnings(spec: Spec, release: EngineRelease) -> list[str]:
    """A secret flag the engine reads from argv only stays in its argv, which any user of the
    host can read (/proc/PID/cmdline): say so, and the file form where the release has one."""
    by_env = release.engine.secret_flag_env
    flags = [arg.partition("=")[0] for arg in spec.engine.args if is_secret_flag(arg)]
    named = f"{release.name} {release.version_text}"
    warnings = []
    for flag in dict.fromkeys(flag for flag in flags if flag not in by_env):
        line = (
            f"{flag} stays in the engine's argv, which every user of the host can read in "
            f"/proc/PID/cmdline: {named} reads no key from the environment"
        )
        if CONFIG_FILE_FLAG in release.table.by_spelling:
            line += (
                # said without a `name: value` shape: the job's redaction would mask the placeholder
                f"; to keep it out, put it in a YAML file only you can read, the key under `{flag[2:]}`, "
                f"and pass {CONFIG_FILE_FLAG} FILE"
            )
        warnings.append(line)
    # a URL's password in an ordinary arg (`--tokenizer https://u:pw@host/tok`) goes the same way
    for index, arg in enumerate(spec.engine.args):
        if url_passwords(arg) and not is_secret_flag(arg):
            before = spec.engine.args[index - 1] if index else ""
            flag = (
                arg.partition("=")[0]
                if arg.startswith("-")
                else before
                if before.startswith("-")
                else "an arg"
            )
            warnings.append(
                f"the password of the URL in {flag} stays in the engine's argv, which every user of the "
                "host can read in /proc/PID/cmdline; to keep it out, give the URL without credentials "
                "and the credential in an environment variable the engine reads (HF_TOKEN for the Hub)"
            )
    return warnings


def run_preflight(resolved: ResolvedSpec) -> Preflight:
    """`check` then `plan` of one resolution of the spec: refuse what the engine would reject
    or what cannot fit."""
    checked = _checked(resolved)
    # a key left in argv is said however check ends: `up --force` starts what it refuses
    warnings = [*checked.warnings, *argv_secret_warnings(resolved.spec, resolved.release)]
    if checked.errors:
        return replace(checked, warnings=warnings)
    plan = make_plan(resolved)
    if plan.fits:
        return replace(checked, plan=plan, warnings=warnings)
    fix = None
    if plan.recommended_args or plan.recommended_env:
        fix = Fix(
            tuple(plan.recommended_args), dict(plan.recommended_env), text="the plan's recommended settings"
        )
    error = "the plan does not fit: " + "; ".join(p.message for p in plan.problems)
    return replace(checked, plan=plan, errors=[error], warnings=warnings, cause="oom", fix=fix)


def _checked(resolved: ResolvedSpec) -> Preflight:
    """What check's findings say: the refusals (with the first fix), the warnings, the flags
    `up` adds."""
    errors: list[str] = []
    warnings: list[str] = []
    added: list[tuple[tuple[str, ...], str]] = []
    fix: Fix | None = None
    for finding in resolved.check.findings:
        line = f"{finding.rule}: {finding.message}"
        if finding.up_applies and finding.fix is not None:
            added.append((finding.fix.args, line))
        elif finding.severity == "warning":
            warnings.append(line)
        elif finding.severity == "error":
            errors.append(line)
            if finding.fix is not None and fix is None:
                fix = replace(finding.fix, text=line)
    return Preflight(None, errors, warnings, "config" if errors else None, fix, added)
