"""MOTChallenge ground truth the tests make: people walking across a picture."""


def write_gt(path, people=3, frames=60):
    """People walking across a 640x480 picture, MOTChallenge rows (1-based frames)."""
    rows = []
    for f in range(1, frames + 1):
        for p in range(1, people + 1):
            rows.append(f"{f},{p},{20 + 4 * f + 150 * (p - 1)},{100 + 20 * p},60,160,1,-1,-1,-1")
    rows.append("3,9,0,0,10,10,0,-1,-1,-1")  # not to be considered
    path.write_text("\n".join(rows) + "\n")
    return path
