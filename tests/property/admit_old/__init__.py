"""The admission pass as it was before it was made linear (issue 10), kept as a
test-only reference: ``test_admit_same.py`` checks that ``qex.admit.admit``
gives the very same Plan, decision for decision and word for word.

``admit.py`` and ``resources.py`` are the old modules verbatim (they still build
attrs classes; only tests import them); the words come from the live
``qex.admit.words``, so a change of wording needs no change here. A deliberate
change of a rule in ``qex/admit`` must be made here too.
"""

from .admit import admit

__all__ = ["admit"]
