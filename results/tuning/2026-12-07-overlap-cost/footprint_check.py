import torch, timeit
from qkbench.kernels.overlap import Footprint
from qkbench.kernels.calls import SLOTS, written
T,Hq,Hk,D=1,32,8,128
buf=torch.empty(T,Hq+2*Hk,D,dtype=torch.bfloat16)
q=buf[:, :Hq]; k=buf[:, Hq:Hq+Hk]
w1=torch.empty(D); w2=torch.empty(D); cs=torch.empty(4096,128); pos=torch.zeros(T,dtype=torch.int64)
for name,(qq,kk) in {"packed":(q,k),"separate":(torch.empty(T,Hq,D,dtype=torch.bfloat16),torch.empty(T,Hk,D,dtype=torch.bfloat16))}.items():
    ts=(qq,kk,None,None,w1,w2,cs,pos)
    fp=Footprint(ts, written(True, ts))
    n=200000
    print(name, min(timeit.repeat(lambda: fp.check(SLOTS, ts), number=n, repeat=5))/n*1e6, "us")
