"""job — beyond one iteration: several jobs on one fabric, stragglers, goodput.

Depends on ``iteration`` and the tiers below it; never on ``traces``.
"""
