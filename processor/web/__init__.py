"""The HTTP read surface: one route table served by ``recurrence serve`` (over an embedded state) and by
the worker's web port, its security (token, headers, refusals), the OpenAPI document, the page (``ui/``),
and how ``serve`` follows a state that a replay is writing."""
