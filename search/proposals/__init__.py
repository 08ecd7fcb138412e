"""Where a sampler's proposals come from besides its own model: the diagnosis of the trials so
far (`DiagnosisProposer`, the moves of `rules`), an earlier study's trials (`PriorSampler`,
for a warm start) and a space-filling design of the first trials (`SpaceFillingStart`).

Modules: `rules` (which move a bottleneck calls for, pure), `proposer` (the sampler that makes
it, mixed with a model-based one), `prior` (the earlier study seen by TPE), `initial_design` (a
Sobol start before the model-based sampler), `delegating` (what the three wrappers share).
"""

from search.proposals.delegating import DelegatingSampler
from search.proposals.initial_design import SpaceFillingStart, sobol_points
from search.proposals.prior import PriorSampler, prior_trials, takes_prior, with_prior
from search.proposals.proposal_rules import RULES, Move, Step, move_for
from search.proposals.proposer import (
    MOVE_ATTR,
    PROPOSAL_ATTR,
    WARM_START_ATTR,
    DiagnosisProposer,
    Proposal,
    follows_diagnoses,
    moved,
    origin,
    proposal_reason,
    propose,
)

__all__ = [
    "MOVE_ATTR",
    "PROPOSAL_ATTR",
    "RULES",
    "WARM_START_ATTR",
    "DelegatingSampler",
    "DiagnosisProposer",
    "Move",
    "PriorSampler",
    "Proposal",
    "SpaceFillingStart",
    "Step",
    "follows_diagnoses",
    "move_for",
    "moved",
    "origin",
    "prior_trials",
    "proposal_reason",
    "propose",
    "sobol_points",
    "takes_prior",
    "with_prior",
]
