"""What the assistant costs: the usage ledger of every model call, and token allowances
(everyone's, a space's, and a named person's own)."""

from core.usage.allowances import (
    WINDOWS,
    Allowance,
    AllowanceError,
    AllowanceWindow,
    PersonAllowances,
)
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
    "WINDOWS",
    "Allowance",
    "AllowanceError",
    "AllowanceWindow",
    "BudgetExceeded",
    "BudgetRefusal",
    "Budgets",
    "Group",
    "LedgerRow",
    "Limits",
    "Period",
    "PersonAllowances",
    "Spent",
    "UsageLedger",
    "period_start",
]
