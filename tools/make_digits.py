"""Write scikit-learn's handwritten digits (1797 x 64, 10 classes) as collectives/data/digits.svm.

Run once; the output is committed, so scikit-learn is needed only to regenerate it.
Pixel intensities are integers 0..16; zeros are left out (sparse rows), indices are one-based.
"""
import os
import sys

from sklearn.datasets import load_digits

OUT = os.path.join(os.path.dirname(__file__), "..", "collectives", "data", "digits.svm")


def main(path=OUT):
    """Convert the digits to LIBSVM text at ``path``."""
    digits = load_digits()
    with open(path, "w") as f:
        for x, y in zip(digits.data.astype(int), digits.target):
            feats = " ".join(f"{j + 1}:{v}" for j, v in enumerate(x) if v)
            f.write(f"{y} {feats}\n" if feats else f"{y}\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
