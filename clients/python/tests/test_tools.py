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
