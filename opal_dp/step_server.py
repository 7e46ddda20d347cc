"""What the multiprocess executor's fork server imports before it forks a process per step
(``defs.shared.executor.MULTIPROCESS``): the job's module and the definitions, built once, so that every step's
process starts with them built instead of building them again (about 1.2 s a step); and the default weekly share of
the person cap (``release.share``), which every step that reads the ledger or plans a release would otherwise compute
again (about 0.5-1 s; a run under other settings computes its own)."""

from opal_dp.defs.shared.budget import PrivacyBudget
from opal_dp.runs import job_by_name

job_by_name("rollup")  # builds, and caches for the process's settings, the definitions every job resolves from
PrivacyBudget().budget()  # cached by its public parameters (``release.share.share_epsilon``)
