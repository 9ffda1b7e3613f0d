"""What the assistant costs: the usage ledger of every model call, and token allowances."""

from core.usage.budgets import BudgetExceeded, BudgetRefusal, Budgets, Limits
from core.usage.ledger import (
    GROUPS,
    PERIODS,
    Group,
    LedgerRow,
    Period,
    Spent,
    UsageLedger,
    period_start,
)

__all__ = [
    "GROUPS",
    "PERIODS",
    "BudgetExceeded",
    "BudgetRefusal",
    "Budgets",
    "Group",
    "LedgerRow",
    "Limits",
    "Period",
    "Spent",
    "UsageLedger",
    "period_start",
]
