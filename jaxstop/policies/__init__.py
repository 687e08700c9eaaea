"""Policies: the functional ask/tell facade (see :mod:`jaxstop.policies._base`)."""

from jaxstop.policies._base import Info as Info
from jaxstop.policies._base import Job as Job
from jaxstop.policies._base import Policy as Policy
from jaxstop.policies._base import Result as Result
from jaxstop.policies._base import make_job as make_job
from jaxstop.policies.random_search import RandomSearchInfo as RandomSearchInfo
from jaxstop.policies.random_search import RandomSearchState as RandomSearchState
from jaxstop.policies.random_search import random_search as random_search

__all__ = [
    "Info",
    "Job",
    "Policy",
    "Result",
    "make_job",
    "RandomSearchInfo",
    "RandomSearchState",
    "random_search",
]
