import json
import unittest

from cellvm import Sandbox, tools

from .fake import SOCKET, needs_daemon


class DefinitionTest(unittest.TestCase):
    def test_forms(self):
        a = tools.anthropic_tool()
        self.assertEqual(a["name"], "run_python")
        self.assertEqual(a["input_schema"]["required"], ["code"])
        self.assertIn("no network access at all", a["description"])
        self.assertIn("at most 60 seconds", a["description"])
        o = tools.openai_tool(network=["pypi.org"], timeout_s=30)
        self.assertEqual(o["type"], "function")
        self.assertIn("limited to: pypi.org", o["function"]["description"])
        self.assertIn("at most 30 seconds", o["function"]["description"])
        self.assertNotIn("${", o["function"]["description"])
        o["function"]["parameters"]["required"].append("mutated")
        self.assertEqual(tools.INPUT_SCHEMA["required"], ["code"])

    def test_clip_middle_states_the_count(self):
        text, cut = tools.clip_middle("a" * 100 + "b" * 100, 50)
        self.assertEqual(cut, 150)
        self.assertTrue(text.startswith("a" * 30))
        self.assertTrue(text.endswith("b" * 20))
        self.assertIn("[150 characters cut from the middle]", text)
        self.assertEqual(tools.clip_middle("short", 50), ("short", 0))


@needs_daemon
class RunToolCallTest(unittest.TestCase):
    def setUp(self):
        self.sbx = Sandbox.create(socket_path=SOCKET)
        self.addCleanup(self.sbx.kill)

    def test_runs_and_formats(self):
        out = tools.run_tool_call(self.sbx, json.dumps({"code": "chart"}))
        self.assertFalse(out.is_error)
        self.assertEqual(len(out.images), 1)
        self.assertIn("[image 1: image/png", out.text)
        block = tools.anthropic_tool_result(out, "toolu_1")
        self.assertEqual([c["type"] for c in block["content"]], ["text", "image"])
        msgs = tools.openai_tool_messages([("call_1", "run_python", out)])
        self.assertEqual([m["role"] for m in msgs], ["tool", "user"])
        self.assertTrue(msgs[1]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,"))

    def test_model_mistakes_are_tool_errors(self):
        for args, want in (("{not json", "not a JSON object"), ({}, 'needs "code"'), ({"code": 1}, 'needs "code"'),
                           ({"code": "x", "timeout_s": 99999}, "out of range"), ([1], "not a JSON object")):
            out = tools.run_tool_call(self.sbx, args)
            self.assertTrue(out.is_error, args)
            self.assertTrue(out.text.startswith("Tool error: "), out.text)
            self.assertIn(want, out.text)

    def test_sandbox_errors_are_tool_errors(self):
        self.sbx.run_code("die")
        out = tools.run_tool_call(self.sbx, {"code": "1"})
        self.assertTrue(out.is_error)
        self.assertIn("VM is gone", out.text)


class _Recorder:
    """A stand-in sandbox that records the code it is asked to run and
    answers with a plain ok result, so approve can be tested without a
    daemon."""

    def __init__(self):
        self.ran = []

    def run_code(self, code, timeout=None):
        self.ran.append(code)
        return {"status": "ok", "execution_count": len(self.ran), "stdout": "ran\n", "stderr": "", "results": [],
                "error": None, "state_kept": True, "killed_by": None, "truncated": {}}


class ApproveTest(unittest.TestCase):
    def test_refused_runs_nothing_and_tells_the_model(self):
        for answer in (False, None):
            sbx, asked = _Recorder(), []
            out = tools.run_tool_call(sbx, {"code": "import os; os.system('rm -rf /')"},
                                      approve=lambda code: asked.append(code) or answer)
            self.assertEqual(asked, ["import os; os.system('rm -rf /')"])
            self.assertEqual(sbx.ran, [])
            self.assertTrue(out.is_error)
            self.assertEqual(out.text, tools.REFUSED)
            self.assertIn("The user refused to run this code", out.text)

    def test_allowed_runs_as_it_is(self):
        sbx = _Recorder()
        out = tools.run_tool_call(sbx, {"code": "x = 1"}, approve=lambda code: True)
        self.assertEqual(sbx.ran, ["x = 1"])
        self.assertFalse(out.is_error)
        self.assertNotIn("edited", out.text)

    def test_edited_runs_the_edit_and_says_so(self):
        sbx = _Recorder()
        out = tools.run_tool_call(sbx, json.dumps({"code": "x = 1"}), approve=lambda code: "y = 7\ny")
        self.assertEqual(sbx.ran, ["y = 7\ny"])
        self.assertTrue(out.text.startswith("[The user edited this code before it ran. What ran:]\ny = 7\ny\n[Its result:]\n"), out.text)
        # Returning the same code is a plain yes.
        out = tools.run_tool_call(sbx, {"code": "z"}, approve=lambda code: code)
        self.assertNotIn("edited", out.text)

    def test_a_failing_or_odd_approve_refuses(self):
        def broken(code):
            raise OSError("the terminal closed")

        sbx = _Recorder()
        for approve, want in ((broken, "asking the user for approval failed: the terminal closed"),
                              (lambda code: 1, "approve returned int"),
                              (lambda code: "x" * (tools.MAX_CODE_BYTES + 1), "at most 1048576")):
            out = tools.run_tool_call(sbx, {"code": "x = 1"}, approve=approve)
            self.assertTrue(out.is_error)
            self.assertTrue(out.text.startswith("Tool error: not run: "), out.text)
            self.assertIn(want, out.text)
        self.assertEqual(sbx.ran, [])

    def test_model_mistakes_come_before_approve(self):
        asked = []
        out = tools.run_tool_call(_Recorder(), {}, approve=lambda code: asked.append(code) or True)
        self.assertTrue(out.is_error)
        self.assertEqual(asked, [])

    def test_async_approve(self):
        class AsyncRecorder(_Recorder):
            async def run_code(self, code, timeout=None):
                return _Recorder.run_code(self, code, timeout)

        async def no(code):
            return False

        async def main():
            sbx = AsyncRecorder()
            refused = await tools.arun_tool_call(sbx, {"code": "x"}, approve=no)
            edited = await tools.arun_tool_call(sbx, {"code": "x"}, approve=lambda code: "y")
            return sbx.ran, refused, edited

        import asyncio
        ran, refused, edited = asyncio.run(main())
        self.assertEqual(ran, ["y"])
        self.assertEqual(refused.text, tools.REFUSED)
        self.assertIn("What ran:]\ny\n", edited.text)


@needs_daemon
class ApproveDaemonTest(unittest.TestCase):
    def test_refused_cell_never_reaches_the_sandbox(self):
        sbx = Sandbox.create(socket_path=SOCKET)
        self.addCleanup(sbx.kill)
        out = tools.run_tool_call(sbx, {"code": "x = 1"}, approve=lambda code: False)
        self.assertEqual(out.text, tools.REFUSED)
        self.assertEqual(sbx.info().cells, 0)
        out = tools.run_tool_call(sbx, {"code": "x = 1"}, approve=lambda code: "x = 5\nx")
        self.assertIn("Out[1]", out.text)
        self.assertIn("5", out.text)
        self.assertEqual(sbx.info().cells, 1)
