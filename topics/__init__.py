"""Topics as code: every topic the stream path uses, its layout and its policy.

``definitions`` says what must exist; ``apply`` creates what is missing and
reports drift on what exists (``recurrence topics apply``), never recreating
or silently altering a topic.
"""
