"""Where the repository and the test fixtures are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
E2E_SCENARIO = FIXTURES / "scenarios" / "e2e.yaml"
