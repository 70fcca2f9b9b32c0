#!/usr/bin/env python3
# Medians table from the output of sidebyside.sh.
import re,sys,statistics as st
cur=None; data={}; scale=1.0
for line in open(sys.argv[1]):
    m=re.match(r'== (\S+) run (\d+) (\S+)',line)
    if m: cur=(m.group(1),m.group(3)); data.setdefault(cur,{'iops':[],'bw':[],'p50':[],'p99':[],'p999':[]}); continue
    if cur is None: continue
    d=data[cur]
    m=re.search(r'IOPS=([\d.]+) BW=([\d.]+)MiB/s lat\(us\) p50=([\d.]+) p99=([\d.]+) p99.9=([\d.]+)',line)
    if m:
        d['iops'].append(float(m.group(1))); d['bw'].append(float(m.group(2)))
        d['p50'].append(float(m.group(3))); d['p99'].append(float(m.group(4))); d['p999'].append(float(m.group(5))); continue
    m=re.search(r'IOPS=([\d.]+)(k?), BW=([\d.]+)(MiB|GiB|KiB)/s',line)
    if m:
        i=float(m.group(1))*(1000 if m.group(2) else 1); bw=float(m.group(3))*{'MiB':1,'GiB':1024,'KiB':1/1024}[m.group(4)]
        d['iops'].append(i); d['bw'].append(bw); continue
    m=re.search(r'clat percentiles \((\w+)\)',line)
    if m:
        scale={'nsec':0.001,'usec':1.0,'msec':1000.0}.get(m.group(1),1.0); continue
    m=re.search(r'50.0th=\[\s*(\d+)\], 99.0th=\[\s*(\d+)\], 99.9th=\[\s*(\d+)\]',line)
    if m:
        d['p50'].append(float(m.group(1))*scale); d['p99'].append(float(m.group(2))*scale); d['p999'].append(float(m.group(3))*scale)
jobs=[]
for (j,t) in data:
    if j not in jobs: jobs.append(j)
print('| job | client | runs | IOPS (median) | MiB/s (median) | p50 us | p99 us | p99.9 us | IOPS of each run |')
print('|---|---|---|---|---|---|---|---|---|')
for j in jobs:
    names={'nbdbench':'nhd nbdbench','nbdbench-async':'nhd nbdbench -engine async','fio':'fio+libnbd'}
    for t in ('nbdbench','nbdbench-async','fio'):
        d=data.get((j,t))
        if not d or not d['iops']: continue
        md=lambda k: st.median(d[k]) if d[k] else float('nan')
        print(f"| {j} | {names[t]} | {len(d['iops'])} | {md('iops'):.0f} | {md('bw'):.1f} | {md('p50'):.1f} | {md('p99'):.0f} | {md('p999'):.0f} | {', '.join('%.0f'%x for x in d['iops'])} |")
    b=data.get((j,'fio'))
    for t,label in (('nbdbench','ratio nhd/libnbd'),('nbdbench-async','ratio nhd async/libnbd')):
        a=data.get((j,t))
        if a and b and a['iops'] and b['iops']:
            print(f"| {j} | **{label}** | | **{st.median(a['iops'])/st.median(b['iops']):.2f}x** | | **{st.median(a['p50'])/st.median(b['p50']):.2f}x** p50 | | | |")
