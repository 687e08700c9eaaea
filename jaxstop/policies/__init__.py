"""Policies: the functional ask/tell facade (see :mod:`jaxstop.policies._base`)."""

from jaxstop.policies._base import Info as Info
from jaxstop.policies._base import Job as Job
from jaxstop.policies._base import Policy as Policy
from jaxstop.policies._base import Result as Result
from jaxstop.policies._base import make_job as make_job
from jaxstop.policies.auto_termination import AutoTerminationInfo as AutoTerminationInfo
from jaxstop.policies.auto_termination import AutoTerminationParams as AutoTerminationParams
from jaxstop.policies.auto_termination import AutoTerminationState as AutoTerminationState
from jaxstop.policies.auto_termination import auto_termination_bo as auto_termination_bo
from jaxstop.policies.halving import Bracket as Bracket
from jaxstop.policies.halving import HalvingInfo as HalvingInfo
from jaxstop.policies.halving import HalvingParams as HalvingParams
from jaxstop.policies.halving import HalvingSchedule as HalvingSchedule
from jaxstop.policies.halving import HalvingState as HalvingState
from jaxstop.policies.halving import bohb as bohb
from jaxstop.policies.halving import halving_schedule as halving_schedule
from jaxstop.policies.halving import hyperband as hyperband
from jaxstop.policies.halving import sh as sh
from jaxstop.policies.random_search import RandomSearchInfo as RandomSearchInfo
from jaxstop.policies.random_search import RandomSearchState as RandomSearchState
from jaxstop.policies.random_search import random_search as random_search
from jaxstop.policies.subsampling import SubsamplingInfo as SubsamplingInfo
from jaxstop.policies.subsampling import SubsamplingState as SubsamplingState
from jaxstop.policies.subsampling import subsampling as subsampling

__all__ = [
    "Info",
    "Job",
    "Policy",
    "Result",
    "make_job",
    "RandomSearchInfo",
    "RandomSearchState",
    "random_search",
    "AutoTerminationInfo",
    "AutoTerminationParams",
    "AutoTerminationState",
    "auto_termination_bo",
    "Bracket",
    "HalvingInfo",
    "HalvingParams",
    "HalvingSchedule",
    "HalvingState",
    "bohb",
    "halving_schedule",
    "hyperband",
    "sh",
    "SubsamplingInfo",
    "SubsamplingState",
    "subsampling",
]
