import sys
from pathlib import Path

# tests import their plain-NumPy references as ``import naive``
sys.path.insert(0, str(Path(__file__).parent))
