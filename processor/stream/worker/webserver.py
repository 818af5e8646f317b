"""The worker's web server: Faust's aiohttp driver, serving the read surface's route table and nothing else.

Faust mounts views of its own on the worker's port (``/`` with the app's
details, ``/router/``, ``/table/...`` with table contents, ``/graph``,
``/stats``) as "blueprints". The worker's port serves exactly the paths its
``/openapi.json`` lists (``routes.ROUTES``), so this driver mounts none of
them; ``WorkerApp.web`` builds it. Everything else about the driver (the
aiohttp application, the site, the server in Faust's service tree) is
Faust's own, so the probes answer from the worker's start, during recovery
too (Faust's newer ``App.web_server`` starts only after table recovery).
"""

from collections.abc import Iterable
from typing import Any, ClassVar

from faust.web.drivers import aiohttp as faust_aiohttp

# (name, blueprint) pairs; Faust's own alias for them is private (``faust.web.base._BPList``).
Blueprints = Iterable[tuple[str, Any]]


class SurfaceWeb(faust_aiohttp.Web):
    """Faust's aiohttp web driver without Faust's blueprints."""

    default_blueprints: ClassVar[Blueprints] = ()
    production_blueprints: ClassVar[Blueprints] = ()
    debug_blueprints: ClassVar[Blueprints] = ()
    optional_blueprints: ClassVar[Blueprints] = ()
