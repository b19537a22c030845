"""A person or tool with DeviceTaintRule and ResourceClaim rights (an SRE, another DRA tool,
a tenant who writes claims): forging or lifting gpuguard's device taint, or tolerating it."""

from __future__ import annotations

from tests.hostile import objects as o
from tests.hostile.model import Case

DRA = "dra-user"
TAINTS = "gpuguard-dra-taints"
TOLERATIONS = "gpuguard-dra-tolerations"
OURS = o.taint_rule(f"gpuguard-gpu-node-a-{o.CARD.lower()}",
                    labels={"app.kubernetes.io/part-of": "gpuguard"})
NO_EXECUTE = {**o.ISOLATION_TOLERATION, "effect": "NoExecute"}
EQUAL = {"key": "gpuguard.io/gpu-isolated", "operator": "Equal", "value": o.CARD,
         "effect": "NoSchedule"}


def _case(name: str, tries: str, refused: dict[str, list[str]], obj: o.Obj | None,
          operation: str = "CREATE", old: o.Obj | None = None,
          user: str = o.PERSON) -> Case:
    return Case(DRA, name, tries, obj, user, refused, operation=operation, old=old)


CASES = [
    _case("foreign-rule-with-gpuguards-key", "a rule of another name with "
          "gpuguard.io/gpu-isolated: a GPU looks isolated by gpuguard",
          {TAINTS: ["dra-taint-key"]}, o.taint_rule("maintenance-gpu-1")),
    _case("foreign-rule-changed-to-gpuguards-key", "an existing rule switched to gpuguard's key",
          {TAINTS: ["dra-taint-key"]}, o.taint_rule("maintenance-gpu-1"), "UPDATE",
          o.taint_rule("maintenance-gpu-1", key="example.com/maint")),
    _case("forges-a-gpuguard-rule", "a gpuguard-* rule on a healthy card",
          {TAINTS: ["dra-taint-owner"]}, o.taint_rule(f"gpuguard-gpu-node-a-{o.CARD.lower()}")),
    _case("labels-a-rule-as-gpuguards", "a rule labelled part-of=gpuguard",
          {TAINTS: ["dra-taint-owner"]}, o.taint_rule("x", labels={
              "app.kubernetes.io/part-of": "gpuguard"})),
    _case("weakens-gpuguards-rule", "gpuguard's NoExecute made NoSchedule",
          {TAINTS: ["dra-taint-owner"]}, OURS, "UPDATE", o.changed(
              OURS, lambda r: r["spec"]["taint"].update(effect="NoExecute"))),
    _case("deletes-gpuguards-rule", "the isolated card back in the pool",
          {TAINTS: ["dra-taint-owner"]}, None, "DELETE", OURS),
    _case("strips-the-label", "removes gpuguard's label to take the rule over",
          {TAINTS: ["dra-taint-owner"]}, o.changed(OURS, lambda r: r["metadata"].pop("labels")),
          "UPDATE", OURS),
    _case("claim-tolerates-the-isolation", "a claim that tolerates gpuguard.io/gpu-isolated",
          {TOLERATIONS: ["dra-toleration"]}, o.claim(o.ISOLATION_TOLERATION)),
    _case("claim-tolerates-no-execute", "tolerates the NoExecute taint",
          {TOLERATIONS: ["dra-toleration"]}, o.claim(NO_EXECUTE)),
    _case("claim-tolerates-one-card", "tolerates the taint of one isolated card",
          {TOLERATIONS: ["dra-toleration"]}, o.claim(EQUAL)),
    _case("claim-first-available-tolerates", "a firstAvailable subrequest that tolerates it",
          {TOLERATIONS: ["dra-toleration"]}, o.claim(o.ISOLATION_TOLERATION, True)),
    _case("claim-template-tolerates", "a ResourceClaimTemplate that tolerates it",
          {TOLERATIONS: ["dra-toleration"]}, o.claim_template(o.ISOLATION_TOLERATION),
          user=o.TENANT_SA),
]
