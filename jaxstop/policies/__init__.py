"""Policies: the functional ask/tell facade (see :mod:`jaxstop.policies._base`)."""

from jaxstop._src.batching import gated_cond as gated_cond
from jaxstop.policies._base import AskFn as AskFn
from jaxstop.policies._base import Incumbent as Incumbent
from jaxstop.policies._base import build_policy as build_policy
from jaxstop.policies._base import init_incumbent as init_incumbent
from jaxstop.policies._base import update_incumbent as update_incumbent
from jaxstop.policies._base import Info as Info
from jaxstop.policies._base import AskBatchFn as AskBatchFn
from jaxstop.policies._base import InitFn as InitFn
from jaxstop.policies._base import Job as Job
from jaxstop.policies._base import Limits as Limits
from jaxstop.policies._base import Policy as Policy
from jaxstop.policies._base import ReportFn as ReportFn
from jaxstop.policies._base import Result as Result
from jaxstop.policies._base import TellBatchFn as TellBatchFn
from jaxstop.policies._base import TellBatchLastFn as TellBatchLastFn
from jaxstop.policies._base import TellFn as TellFn
from jaxstop.policies._base import make_job as make_job
from jaxstop.policies._base import make_result as make_result
from jaxstop.policies.auto_termination import AutoTerminationInfo as AutoTerminationInfo
from jaxstop.policies.auto_termination import AutoTerminationParams as AutoTerminationParams
from jaxstop.policies.auto_termination import AutoTerminationState as AutoTerminationState
from jaxstop.policies.auto_termination import auto_termination_bo as auto_termination_bo
from jaxstop.policies.bo_bos import BoBosInfo as BoBosInfo
from jaxstop.policies.bo_bos import BoBosParams as BoBosParams
from jaxstop.policies.bo_bos import BoBosState as BoBosState
from jaxstop.policies.bo_bos import bo_bos as bo_bos
from jaxstop.policies.bo_bos import default_intermediate_epochs as default_intermediate_epochs
from jaxstop.policies.bo_bos import gp_ucb as gp_ucb
from jaxstop.policies.halving import Bracket as Bracket
from jaxstop.policies.halving import HalvingInfo as HalvingInfo
from jaxstop.policies.halving import HalvingParams as HalvingParams
from jaxstop.policies.halving import HalvingSchedule as HalvingSchedule
from jaxstop.policies.halving import HalvingBOHBState as HalvingBOHBState
from jaxstop.policies.halving import HalvingProfileState as HalvingProfileState
from jaxstop.policies.halving import HalvingState as HalvingState
from jaxstop.policies.halving import HalvingUQState as HalvingUQState
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
    "make_result",
    "InitFn",
    "AskBatchFn",
    "TellBatchFn",
    "TellBatchLastFn",
    "Limits",
    "AskFn",
    "ReportFn",
    "TellFn",
    "build_policy",
    "Incumbent",
    "init_incumbent",
    "update_incumbent",
    "gated_cond",
    "RandomSearchInfo",
    "RandomSearchState",
    "random_search",
    "AutoTerminationInfo",
    "AutoTerminationParams",
    "AutoTerminationState",
    "auto_termination_bo",
    "BoBosInfo",
    "BoBosParams",
    "BoBosState",
    "bo_bos",
    "default_intermediate_epochs",
    "gp_ucb",
    "Bracket",
    "HalvingInfo",
    "HalvingParams",
    "HalvingSchedule",
    "HalvingState",
    "HalvingUQState",
    "HalvingBOHBState",
    "HalvingProfileState",
    "bohb",
    "halving_schedule",
    "hyperband",
    "sh",
    "SubsamplingInfo",
    "SubsamplingState",
    "subsampling",
]
