"""A visitor who asks for reduced motion sees nothing turn: the busy button's spinner is drawn by a
::before pseudo-element, which a rule on `*` alone does not reach."""

import pytest

from tests.panel_browser import new_context
from tests.panel_node import node, set_up  # noqa: F401  (node: the fixture)

RUNNING = "() => document.getAnimations().filter(a => a.playState === 'running').length"


@pytest.mark.parametrize("motion", ["no-preference", "reduce"])
def test_a_busy_button_turns_only_without_reduced_motion(browser, node, motion):  # noqa: F811
    set_up(node, "files.example.test")
    context = new_context(browser, node, reduced_motion=motion)
    page = context.new_page()
    try:
        page.goto("/#/domains")
        button = page.get_by_role("button", name="Sign in")
        button.wait_for()
        button.evaluate("b => b.setAttribute('aria-busy', 'true')")
        running = page.evaluate(RUNNING)
        if motion == "reduce":
            assert running == 0
        else:
            assert running >= 1   # the spinner turns: what the reduced-motion rule has to stop
    finally:
        context.close()
