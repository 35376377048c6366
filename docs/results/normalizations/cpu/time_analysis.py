"""One timing of the dynamics analysis (analysis.run, compile included) of a :smoke run:
argv[2] = 'after' (the package's analysis.py) or a path to the earlier analysis.py."""
import importlib.util
import json
import os
import sys
import time
from anisotropy_jax.config import AnalysisConfig
if sys.argv[2] == "after":
    from anisotropy_jax.studies.train import analysis as mod
else:
    spec = importlib.util.spec_from_file_location("analysis_before", sys.argv[2])
    mod = importlib.util.module_from_spec(spec); sys.modules["analysis_before"] = mod
    spec.loader.exec_module(mod)
t = time.perf_counter(); mod.run(sys.argv[1], AnalysisConfig(batch_size=8))
print(json.dumps({"which": sys.argv[2], "run_s": time.perf_counter() - t,
                  "load_average": os.getloadavg()}))
