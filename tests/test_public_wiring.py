"""The public path is handed named collaborators by the composition root, never the App (issue 29).

The objects build_app makes for the public port are looked at in a running
App: none keeps the App in an attribute, a method bound to it, or a function
closing over it, nor does the admin dispatcher the public port hands the
admin host's requests to (its handlers get an AdminContext, not the App).
"""

import pytest

from tests.wiring import holding as _holding

pytestmark = pytest.mark.in_process


def test_the_public_path_keeps_no_app(node):
    app = node.app
    assert _holding(app.admin_dispatcher, app) == []
    dispatcher = app.public_dispatcher
    context = dispatcher.context   # what a public stage reaches as req.app
    assert context is not app
    for name, obj in [("the public dispatcher", dispatcher), ("its context", context),
                      ("the prepared answers", context.prepared), ("the insight", context.insight)]:
        assert _holding(obj, app) == [], f"{name} keeps the App"

