"""The outliers grid's learning-rate sweep, read from its archives (outliers_<arm>_lr<lr>.tgz
beside this file, made by call.sh): per run the mean and 95 % interval over its 3 seeds of the
final validation loss, with the massive-activation ratio and sink rate beside it, and per
optimiser the learning rate the committed rule picks (the lowest mean final validation loss).

    .venv/bin/python docs/results/normalizations/outliers_h100/lr_sweep/lr_sweep.py
"""
import json
import pathlib
import re
import tarfile

HERE = pathlib.Path(__file__).resolve().parent
FIELD = {"sgd": "sgd_learning_rate", "muon": "muon_learning_rate"}


def runs():
    """[(optimiser, learning rate, the bigram_backcopy/softmax cell of results.json)]."""
    out = []
    for path in sorted(HERE.glob("outliers_*_lr*.tgz")):
        arm, lr = re.fullmatch(r"outliers_(.+)_lr(.+)\.tgz", path.name).groups()
        with tarfile.open(path) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith("/results.json")
                          and m.name.count("/") == 1)
            result = json.load(archive.extractfile(member))
        optim = result["grid_config"]["bigram_backcopy"]["optim"]
        assert optim["optimizer"] == arm and optim[FIELD.get(arm, "learning_rate")] == float(lr)
        out.append((arm, float(lr), result["cells"]["bigram_backcopy"]["softmax"]))
    return out


def table():
    rows = ["| optimiser | learning rate | step | final validation loss, mean [95 %] | "
            "max/median | sink rate | picked |", "|---|---|---|---|---|---|---|"]
    found = runs()
    best = {}
    for arm, lr, cell in found:
        if arm not in best or cell["val_loss"]["mean"] < best[arm][1]:
            best[arm] = (lr, cell["val_loss"]["mean"])
    for arm, lr, cell in sorted(found, key=lambda r: (r[0], r[1])):
        v, m, s = cell["val_loss"], cell["massive_top_ratio"], cell["sink_rate"]
        rows.append(f"| {arm} | {lr:g} | {cell['step']} | {v['mean']:.3f} [{v['low']:.3f}, "
                    f"{v['high']:.3f}] | {m['mean']:.1f} | {s['mean']:.2f} | "
                    f"{'yes' if best[arm][0] == lr else ''} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(table(), end="")
