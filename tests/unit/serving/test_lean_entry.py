"""The server's default command is the lean entry; the command shown to the user stays
`python -m vllm.entrypoints.openai.api_server` (serving.process.LaunchSpec, command_line).
"""

from serving import resolve_server_args
from serving.process import command_line
from serving.process.server import LaunchSpec
from tests.support import fakes


def test_the_lean_entry_is_the_default_and_the_users_command_stays_python_dash_m():
    spec = LaunchSpec(model=None, args=[], log_path=None)
    assert spec.command(port=1)[1] == "-c"
    ctx = fakes.ctx()
    user = command_line(ctx, resolve_server_args({}, ctx, where="t"))
    assert user.startswith("python -m vllm.entrypoints.openai.api_server --model ")
